# Upgrades of shared holds (calls.c, kinds/plain/acquire.lua) and the
# read unlock's message, against what they are meant to keep:
#
# - an upgrade given back by ROLLBACK TO SAVEPOINT, COMMIT or ROLLBACK, in
#   each mix of scopes, leaves the other hold as it was, in Redis and in
#   rlock_locks, and nothing once both are gone;
# - the shared hold left keeps its own lease: an explicit one ends the
#   lock when it runs out (an exclusive hold's longer lease no longer
#   keeps it), the watchdog's goes on being renewed;
# - an upgrade counts a fencing token;
# - a hash changed behind rlock's back (another field, "mode" missing,
#   another session's reader field) is no upgrade, and no crash;
# - an upgrade beside a reader that is merely slow waits (its mark
#   rlock_upgrade:{key}) and gets the lock at that reader's commit, whose
#   release, leaving one reader, publishes "1" on the lock's channel;
# - local waiters, exclusive and shared, are woken at the commit, not at
#   the lease's end; rlock_blocking_pids names the upgrader once and never
#   a session itself; a cycle through an upgraded lock and a row has one
#   victim; waiters of both instances for an upgrader (detection global)
#   make no victim, and get the lock in turn;
# - a Java writer waiting for an upgrader gets the lock at its commit;
#   after the exclusive hold alone is given back, Java readers join; at
#   the last shared release ("0" on redisson_rwlock:{name}) a Java writer
#   and a waiter of another instance both get the lock in turn, promptly.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Redisson;
use RlockTest::TLS;

plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my @conf = ("deadlock_timeout = '500ms'", "rlock.watchdog_timeout = '3s'",
	'rlock.deadlock_detection = global');
my $node = RlockTest::node('up1', $redis, conf => [@conf]);
my $node2 = RlockTest::node('up2', $redis, conf => [@conf]);
$node->safe_psql('postgres', q{
	CREATE TABLE t (id int PRIMARY KEY, v int);
	INSERT INTO t SELECT g, 0 FROM generate_series(1, 10) g;
});

my ($a, $b, $c) = map { RlockTest::session($node) } 1 .. 3;
my $d = RlockTest::session($node2);

# Whether key $k is gone from Redis within 10 s: releases at a commit or
# rollback are queued to the worker, not waited for
sub gone
{
	my ($k) = @_;
	return RlockTest::wait_until(sub { $redis->cmd('EXISTS', $k) == 0 }, 10);
}

sub sql { return $node->safe_psql('postgres', $_[0]) }

# The hash of lock $k, its fields sorted, owners' uuids cut off.
sub hash
{
	my ($k) = @_;
	my %h = @{ $redis->cmd('HGETALL', $k) };
	return join(',', map { (my $f = $_) =~ s/^.*:(\d+)$/:$1/; "$f=$h{$_}" }
		  sort keys %h);
}

# What rlock_locks holds of lock $k: "mode/scope/count" sorted.
sub held
{
	my ($k) = @_;
	return sql("SELECT string_agg(mode || '/' || scope || '/' || count, ',' ORDER BY mode, scope) FROM rlock_locks WHERE key = '$k' AND state = 'held'");
}

sub waiting
{
	my ($k) = @_;
	return sql("SELECT count(*) FROM rlock_locks WHERE key = '$k' AND state = 'waiting'");
}

# Run $sql in session $s; returns its error output (cleared).
sub err_of
{
	my ($s, $sql) = @_;
	$s->query($sql);
	my $e = $s->{stderr};
	$s->{stderr} = '';
	return $e;
}

#---- scopes: upgrade given back, the other hold left as it was ----

{
	my $k = 'up:sp';
	is($a->query_safe("SELECT rlock_session_try_shared('$k')"), 't', 'session shared');
	$a->query_safe('BEGIN; SAVEPOINT s');
	is($a->query_safe("SELECT rlock_try('$k')"), 't', 'upgrade in a savepoint');
	like(hash($k), qr/^:\d+=1,:\d+=1,mode=write$/, 'the hash holds both');
	$a->query_safe('ROLLBACK TO SAVEPOINT s');
	like(hash($k), qr/^:\d+=1,mode=read$/, 'rollback to savepoint: a read lock again');
	is(held($k), 'shared/session/1', 'rollback to savepoint: the shared hold alone');
	is($b->query_safe("BEGIN; SELECT rlock_try_shared('$k')"), 't', 'another reader joins');
	$a->query_safe('COMMIT');
	is($a->query_safe("SELECT rlock_session_release_shared('$k')"), 't', 'shared given back');
	is($redis->cmd('EXISTS', $k), 1, 'the other reader still holds it');
	is($a->query_safe("SELECT rlock_try('$k')"), 'f', 'no upgrade without a shared hold: busy');

	is($b->query_safe("SELECT rlock_session_try('$k')"), 't', 'session-scoped upgrade of a transaction-scoped shared hold');
	$b->query_safe('COMMIT');
	like(hash($k), qr/^:\d+=1,mode=write$/, 'commit: the exclusive hold alone');
	is(held($k), 'exclusive/session/1', 'rlock_locks agrees');
	is($b->query_safe("SELECT rlock_session_release('$k')"), 't', 'released');
	ok(gone($k), 'nothing left');

	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k'); SELECT rlock_try('$k'); SELECT rlock_try('$k')");
	is(held($k), 'exclusive/transaction/2,shared/transaction/1', 'upgrade re-entered');
	$a->query_safe('ROLLBACK');
	ok(gone($k), 'rollback: nothing left in Redis');
	is(held($k), '', 'nor in rlock_locks');

	# release of the shared hold while upgraded, then of the exclusive one
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k'); SELECT rlock_try('$k')");
	is($a->query_safe("SELECT rlock_release_shared('$k')"), 't', 'shared given back first');
	like(hash($k), qr/^:\d+=1,mode=write$/, 'the exclusive hold stays');
	is($b->query_safe("SELECT rlock_try_shared('$k')"), 'f', 'and keeps readers out');
	$a->query_safe('COMMIT');
	ok(gone($k), 'commit: nothing left');
}

#---- leases ----

{
	# a short explicit shared lease, upgraded under the watchdog: once the
	# exclusive hold is given back, the lock ends with the shared lease
	my $k = 'up:lease1';
	$a->query_safe("SELECT rlock_session_try_shared('$k', '0 s', '2 s')");
	$a->query_safe('BEGIN');
	is($a->query_safe("SELECT rlock_try('$k')"), 't', 'upgrade of a 2 s shared hold');
	cmp_ok($redis->cmd('PTTL', $k), '>', 2500, 'the watchdog lease of the exclusive hold');
	$a->query_safe('ROLLBACK');
	cmp_ok($redis->cmd('PTTL', $k), '<=', 2000,
		'exclusive hold given back: the lock keeps the shared lease, not the exclusive one');
	my $t0 = time;
	my $got = $b->query_safe("BEGIN; SELECT rlock_try('$k', '10 s', '1 s')");
	is($got, 't', 'a writer gets it');
	cmp_ok(time - $t0, '<', 2.9, 'at the shared lease\'s end');
	$b->query_safe('COMMIT');
	$a->query("SELECT rlock_session_release_shared('$k')");
	$a->{stderr} = '';

	# a long explicit shared lease, the exclusive hold re-entered and
	# given back with a short one: the shared hold keeps its lease
	$k = 'up:lease3';
	$a->query_safe("SELECT rlock_session_try_shared('$k', '0 s', '60 s')");
	$a->query_safe("BEGIN; SELECT rlock_try('$k', '0 s', '1 s')");
	$a->query_safe("SAVEPOINT s; SELECT rlock_try('$k', '0 s', '1 s')");
	cmp_ok($redis->cmd('PTTL', $k), '>', 50000,
		'a re-entry with a 1 s lease keeps the shared hold\'s 60 s');
	$a->query_safe('ROLLBACK TO SAVEPOINT s');
	cmp_ok($redis->cmd('PTTL', $k), '>', 50000, 'and so does giving it back');
	$a->query_safe('COMMIT');
	like(hash($k), qr/^:\d+=1,mode=read$/, 'a read lock after the commit');
	cmp_ok($redis->cmd('PTTL', $k), '>', 50000, 'with its 60 s');
	is($a->query_safe("SELECT rlock_session_release_shared('$k')"), 't', 'released');
	ok(gone($k), 'nothing left');

	# the reverse: the shared hold under the watchdog, a short exclusive
	# lease; after the exclusive hold, the shared one is still renewed
	$k = 'up:lease2';
	$a->query_safe("SELECT rlock_session_try_shared('$k')");
	$a->query_safe('BEGIN');
	is($a->query_safe("SELECT rlock_try('$k', '0 s', '500 ms')"), 't', 'upgrade with a 500 ms lease');
	cmp_ok($redis->cmd('PTTL', $k), '>', 1000, 'the lease is not shortened');
	$a->query_safe('COMMIT');
	ok(RlockTest::wait_for_renewal($redis, $k, 5), 'the shared hold is still renewed');
	is(hash($k) =~ /mode=read/ ? 1 : 0, 1, 'as a read lock');
	is($a->query_safe("SELECT rlock_session_release_shared('$k')"), 't', 'released');
	ok(gone($k), 'nothing left');

	# the same, the exclusive hold under the watchdog: its renewals do not
	# cut the shared hold's lease either
	$k = 'up:lease4';
	$a->query_safe("SELECT rlock_session_try_shared('$k', '0 s', '60 s')");
	$a->query_safe("BEGIN; SELECT rlock_try('$k')");
	my $renewals = sql('SELECT renewals FROM rlock_stats()');
	ok(RlockTest::wait_until(
			sub { sql('SELECT renewals FROM rlock_stats()') >= $renewals + 2 }, 10),
		'the watchdog renews the exclusive hold');
	cmp_ok($redis->cmd('PTTL', $k), '>', 50000, 'without cutting the shared hold\'s 60 s');
	$a->query_safe('COMMIT');
	cmp_ok($redis->cmd('PTTL', $k), '>', 50000, 'which the read lock keeps');
	is($a->query_safe("SELECT rlock_session_release_shared('$k')"), 't', 'released');
}

#---- fencing token ----

{
	my $k = 'up:tok';
	my $t1 = $b->query_safe("BEGIN; SELECT rlock_try_token('$k'); COMMIT");
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	my $t2 = $a->query_safe("SELECT rlock_try_token('$k')");
	cmp_ok($t2, '>', $t1, 'an upgrade counts a new token');
	$a->query_safe('COMMIT');
}

#---- the hash changed behind rlock's back ----

{
	my $k = 'up:odd';
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	$redis->cmd('HSET', $k, 'extra', '1');
	is($a->query_safe("SELECT rlock_try('$k')"), 'f', 'another field: busy');
	is($a->query_safe("SELECT rlock_try('$k', '1 s')"), 'f', 'with a wait: busy when it ends');
	$a->query('ROLLBACK');
	$a->{stderr} = '';
	$redis->cmd('DEL', $k);

	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	$redis->cmd('HDEL', $k, 'mode');
	is($a->query_safe("SELECT rlock_try('$k')"), 'f', '"mode" missing: busy');
	$a->query('ROLLBACK');
	$a->{stderr} = '';
	$redis->cmd('DEL', $k);

	# the reader field of session a planted, a not holding: b's try is no
	# upgrade
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	my %h = @{ $redis->cmd('HGETALL', $k) };
	$a->query_safe('ROLLBACK');
	# the release is queued at the rollback: planted before it ran, the
	# field would be taken out by it
	ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $k) == 0 }, 10),
		'the rollback gave the shared hold back');
	$redis->cmd('HSET', $k, %h);
	$redis->cmd('PEXPIRE', $k, 60000);
	is($b->query_safe("SELECT rlock_try('$k')"), 'f', 'another session\'s reader field: busy for b');
	# for a, whose own stale field it is, a grant is no harm, as long as
	# giving the lock back leaves nothing behind
	my $got = $a->query_safe("BEGIN; SELECT rlock_try('$k')");
	$a->query_safe('COMMIT');
	ok($got eq 'f' ||
		  RlockTest::wait_until(sub { $redis->cmd('EXISTS', $k) == 0 }, 10),
		'a, holding nothing, over its own stale reader field: nothing left behind');
	$redis->cmd('DEL', $k);
	is(sql('SELECT 1'), '1', 'still up');
}

#---- local waiters ----

{
	my $k = 'up:wait';
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k', '0 s', '60 s')");
	RlockTest::send_query($b, "BEGIN; SELECT rlock_try('$k', '20 s', '5 s');");
	ok(RlockTest::wait_until(sub { waiting($k) == 1 }, 10), 'an exclusive waiter');
	is(sql("SELECT rlock_blocking_pids($b->{rlock_pid})"), "{$a->{rlock_pid}}",
		'blocked by the reader');
	is($a->query_safe("SELECT rlock_try('$k')"), 't', 'the reader upgrades');
	is(sql("SELECT rlock_blocking_pids($b->{rlock_pid})"), "{$a->{rlock_pid}}",
		'blocked by the upgrader, named once');
	is(sql("SELECT rlock_blocking_pids($a->{rlock_pid})"), '{}', 'the upgrader waits for nobody');
	RlockTest::send_query($c, "BEGIN; SELECT rlock_try_shared('$k', '20 s', '5 s');");
	ok(RlockTest::wait_until(sub { waiting($k) == 2 }, 10), 'a shared waiter too');
	my $t0 = time;
	$a->query_safe('COMMIT');
	my ($ob, $eb) = RlockTest::collect($b);
	my $tb = time;
	is($ob, 't', 'the exclusive waiter gets it') or diag($eb);
	cmp_ok($tb - $t0, '<', 2.5, 'at the commit, not the 60 s lease\'s end');
	$b->query_safe('COMMIT');
	my ($oc, $ec) = RlockTest::collect($c);
	is($oc, 't', 'the shared waiter after it') or diag($ec);
	cmp_ok(time - $tb, '<', 2.5, 'at the exclusive waiter\'s commit');
	$c->query_safe('COMMIT');

	# shared in session scope, upgrade in the transaction: a shared waiter
	# gets in at the commit
	$k = 'up:wait2';
	$a->query_safe("SELECT rlock_session_try_shared('$k', '0 s', '60 s')");
	$a->query_safe("BEGIN; SELECT rlock_try('$k')");
	RlockTest::send_query($c, "BEGIN; SELECT rlock_try_shared('$k', '20 s', '5 s');");
	ok(RlockTest::wait_until(sub { waiting($k) == 1 }, 10), 'a shared waiter');
	$t0 = time;
	$a->query_safe('COMMIT');
	($oc, $ec) = RlockTest::collect($c);
	is($oc, 't', 'gets in beside the remaining shared hold') or diag($ec);
	cmp_ok(time - $t0, '<', 2.5, 'at the commit');
	$c->query_safe('COMMIT');
	$a->query_safe("SELECT rlock_session_release_shared('$k')");
}

#---- a cycle through an upgraded lock and a row ----

{
	my $k = 'up:dl';
	my $before = RlockTest::deadlocks($node);
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	$b->query_safe('BEGIN; UPDATE t SET v = v + 1 WHERE id = 1');
	RlockTest::send_query($b, "SELECT rlock_try('$k', '30 s'); COMMIT;");
	ok(RlockTest::in_wait($b), 'b waits for the reader');
	is($a->query_safe("SELECT rlock_try('$k')"), 't', 'which upgrades');
	RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 1; COMMIT;");
	my ($victims, $took) = RlockTest::deadlock_victims([ $a, $b ], time);
	is(scalar @$victims, 1, 'one victim');
	my %out;
	for my $s ($a, $b)
	{
		my ($o, $e) = RlockTest::collect($s);
		$out{ $s == $victims->[0] ? 'victim' : 'other' } = $e;
	}
	like($out{victim} // '', qr/40P01: deadlock detected/, 'deadlock detected');
	unlike($out{other} // '', qr/ERROR/, 'the other commits');
	is(held($k), '', 'nothing left held');
}

#---- an upgrade beside a reader that is merely slow ----

# as PostgreSQL's advisory locks (pg_advisory_xact_lock_shared, then
# pg_advisory_xact_lock beside another session's shared hold), the
# upgrade waits and gets the lock when the other reader commits: no
# 40P01 without a cycle
{
	my $k = 'up:slow';
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	$c->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	RlockTest::send_query($a, "SELECT rlock_try('$k', '10 s');");
	RlockTest::wait_until(
		sub {
			$a->{run}->pump_nb;
			return $a->{stderr} =~ /40P01/ || RlockTest::count_waiting($node, $a->{rlock_pid});
		},
		10);
	my $sub = $redis->connect;
	$sub->send_cmd('SUBSCRIBE', "redisson_lock__channel:{$k}");
	$sub->read_reply(5);
	ok($redis->cmd('EXISTS', "rlock_upgrade:{$k}"), 'the waiting upgrade left its mark');
	$c->query_safe('COMMIT');
	my $m = $sub->next_message(5);
	is_deeply($m, [ "redisson_lock__channel:{$k}", '1' ],
		'the release that leaves one reader tells the lock\'s channel "1"');
	my ($o, $e) = RlockTest::collect($a);
	is($o, 't', 'the upgrade waits for the other reader\'s commit and gets the lock');
	unlike($e, qr/40P01/, 'no 40P01 without a cycle');
	$a->query('ROLLBACK');
	$a->{stderr} = '';
}
is($redis->cmd('EXISTS', 'up:slow'), 0, 'after the slow reader: nothing left');

#---- across instances: waits for an upgrader are no cycle ----

{
	my $k = 'up:gl';
	$a->query_safe("SELECT rlock_session_try_shared('$k', '0 s', '60 s')");
	$a->query_safe("BEGIN; SELECT rlock_try('$k')");
	RlockTest::send_query($d, "BEGIN; SELECT rlock_try('$k', '20 s');");
	ok(RlockTest::wait_until(
			sub { $node2->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE key = '$k' AND state = 'waiting'") == 1 }, 10),
		'a writer of the other instance waits');
	RlockTest::send_query($c, "BEGIN; SELECT rlock_try_shared('$k', '20 s');");
	ok(RlockTest::wait_until(sub { waiting($k) == 1 }, 10), 'a local reader waits');
	is(sql("SELECT rlock_blocking_pids($c->{rlock_pid})"), "{$a->{rlock_pid}}",
		'blocked by the upgrader');
	# four deadlock_timeouts: a victim would have been chosen by then
	my $victim = RlockTest::wait_until(
		sub {
			$_->{run}->pump_nb for ($c, $d);
			return ($c->{stderr} . $d->{stderr}) =~ /40P01/;
		},
		2);
	ok(!$victim, 'no victim');
	my $t0 = time;
	$a->query_safe('COMMIT');
	my ($oc, $ec) = RlockTest::collect($c);
	is($oc, 't', 'the exclusive hold given back, the reader joins') or diag($ec);
	cmp_ok(time - $t0, '<', 2.5, 'at once');
	$a->query_safe("SELECT rlock_session_release_shared('$k')");
	$t0 = time;
	$c->query_safe('COMMIT');
	my ($od, $ed) = RlockTest::collect($d);
	is($od, 't', 'the last reader gone, the writer of the other instance gets it') or diag($ed);
	cmp_ok(time - $t0, '<', 2.5, 'at once');
	$d->query_safe('COMMIT');
	ok(gone($k), 'nothing left');
}

#---- Redisson ----

{
	my $java = RlockTest::Redisson->start($redis, watchdog => 3000);
	my $k = 'up:java';

	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k', '0 s', '60 s')");
	my $id = $java->send('w.1', 'write.trylock', $k, 20000);
	ok(RlockTest::wait_until(
			sub { $redis->cmd('PUBSUB', 'NUMSUB', "redisson_rwlock:{$k}")->[1] >= 1 }, 10),
		'a Java writer waits');
	is($a->query_safe("SELECT rlock_try('$k')"), 't', 'the reader upgrades');
	my $t0 = time;
	$a->query_safe('COMMIT');
	my $r = $java->result($id, 25);
	ok($r && $r->{value} eq 'true', 'the Java writer gets it');
	cmp_ok(($r ? $r->{at} : 99) - $t0, '<', 2.5, 'at the commit');
	$java->call('w.1', 'write.unlock', $k);

	$a->query_safe("SELECT rlock_session_try_shared('$k')");
	$a->query_safe("BEGIN; SELECT rlock_try('$k')");
	is($java->call('r.1', 'read.trylock', $k, 0), 'false', 'upgraded: a Java reader is out');
	$a->query_safe('COMMIT');
	# the commit queues its release to the worker and does not wait for it
	ok(RlockTest::wait_until(sub { hash($k) =~ /^:\d+=1,mode=read$/ }, 5),
		'the exclusive hold given back: a read lock again');
	is($java->call('r.1', 'read.trylock', $k, 0), 'true', 'exclusive hold given back: a Java reader joins');
	is($java->call('w.1', 'write.trylock', $k, 0), 'false', 'a Java writer is still out');
	$java->call('r.1', 'read.unlock', $k);

	# the last shared release: a Java writer and a waiter of another
	# instance both get the lock, one after the other, each promptly
	$a->query_safe("BEGIN; SELECT rlock_try('$k'); SELECT rlock_session_release_shared('$k')");
	$a->query_safe('COMMIT');
	ok(gone($k), 'free');
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k', '0 s', '60 s')");
	$id = $java->send('w.1', 'write.trylock', $k, 20000);
	RlockTest::send_query($d,
		"BEGIN; SELECT rlock_try('$k', '20 s'), extract(epoch FROM clock_timestamp());");
	ok(RlockTest::wait_until(
			sub { $node2->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE key = '$k' AND state = 'waiting'") == 1 }, 10),
		'a waiter of another instance');
	ok(RlockTest::wait_until(
			sub { $redis->cmd('PUBSUB', 'NUMSUB', "redisson_rwlock:{$k}")->[1] >= 2 }, 10),
		'both listen on the read-write channel');
	$t0 = time;
	$a->query_safe('COMMIT');
	$r = $java->result($id, 1);
	if ($r && $r->{value} eq 'true')
	{
		pass('the Java writer first');
		cmp_ok($r->{at} - $t0, '<', 2.5, 'at the read unlock');
		my $t1 = time;
		$java->call('w.1', 'write.unlock', $k);
		my ($o, $e) = RlockTest::collect($d);
		like($o, qr/^t\|(\d+\.\d+)/m, 'then the other instance') or diag($e);
		cmp_ok(($o =~ /^t\|(\d+\.\d+)/m ? $1 : 99) - $t1, '<', 2.5, 'at the write unlock');
		$d->query_safe('COMMIT');
	}
	else
	{
		my ($o, $e) = RlockTest::collect($d);
		like($o, qr/^t\|(\d+\.\d+)/m, 'the other instance first') or diag($e);
		cmp_ok(($o =~ /^t\|(\d+\.\d+)/m ? $1 : 99) - $t0, '<', 2.5, 'at the read unlock');
		my $t1 = time;
		$d->query_safe('COMMIT');
		$r = $java->result($id, 25);
		ok($r && $r->{value} eq 'true', 'then the Java writer');
		cmp_ok(($r ? $r->{at} : 99) - $t1, '<', 2.5, 'at the commit');
		$java->call('w.1', 'write.unlock', $k);
	}
	ok(gone($k), 'nothing left');
	$java->stop;
}

$_->quit for ($a, $b, $c, $d);
done_testing();
