# Upgrades that wait (holds.c, worker/send.c, kinds/plain/acquire.lua
# and release_shared.lua), against what they are meant to keep:
#
# - three upgraders of one key, on one instance and across two
#   (rlock.deadlock_detection = global): two victims, the last one
#   upgrades;
# - an exclusive waiter of the same instance queued before an upgrader
#   neither starves it nor makes a victim, and the upgrader gets the
#   lock at the other reader's commit, at once (its tries, counted with
#   MONITOR, are not the one-second retries);
# - an upgrade wait ended by lock_timeout, statement_timeout,
#   pg_cancel_backend and pg_terminate_backend leaves the shared hold
#   as it was and nothing else (the mark ends within its 2 s);
# - the other reader's session-scope hold given back by
#   rlock_session_release_shared lets the upgrader in at once;
# - session forms: an upgrade for a token, one ended by lock_timeout;
# - a reader gone without a message: the upgrader's next try, within a
#   second, gets the lock, and so it does over a reader whose explicit
#   lease ran out, whose field goes (its commit then fails, 40001);
# - the other reader's backend terminated lets the upgrade in; the other
#   reader waiting for a row the upgrader holds is a cycle whose victim
#   is the upgrader;
# - Redis restarted under a waiting upgrade: no 40P01, nothing left;
# - a slow reader, deadlock_timeout 100 ms: the upgrader never gets
#   40P01.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;

my $redis = RlockTest::Redis->start;
my @conf = ("deadlock_timeout = '100ms'", "rlock.watchdog_timeout = '3s'",
	'rlock.deadlock_detection = global');
my $node = RlockTest::node('uw1', $redis, conf => [@conf]);
my $node2 = RlockTest::node('uw2', $redis, conf => [@conf]);

my ($a, $b, $c) = map { RlockTest::session($node) } 1 .. 3;
my $d = RlockTest::session($node2);
$node->safe_psql('postgres', q{
	CREATE TABLE t (id int PRIMARY KEY, v int);
	INSERT INTO t SELECT g, 0 FROM generate_series(1, 10) g;
});

sub sql { return $node->safe_psql('postgres', $_[0]) }

# Fields of the hash of lock $k, owners' uuids cut off, sorted.
sub hash
{
	my ($k) = @_;
	my %h = @{ $redis->cmd('HGETALL', $k) };
	return join(',', map { (my $f = $_) =~ s/^.*:(\d+)$/:$1/; "$f=$h{$_}" }
		  sort keys %h);
}

sub held
{
	my ($k, $n) = @_;
	return ($n // $node)->safe_psql('postgres',
		"SELECT coalesce(string_agg(mode || '/' || scope || '/' || count, ',' ORDER BY mode, scope), '') FROM rlock_locks WHERE key = '$k'");
}

# Wait until the backend of $s waits for the worker; pumps it, so that an
# early error shows.
sub waits
{
	my ($s) = @_;
	return RlockTest::wait_until(
		sub {
			$s->{run}->pump_nb;
			return RlockTest::count_waiting($s->{rlock_node}, $s->{rlock_pid});
		},
		10);
}

# Pump @s until $want of them failed with 40P01 and the others ended,
# 20 s at most; returns (victims, winners' outputs), and marks each
# session's {victim}.
sub outcome
{
	my ($want, @s) = @_;
	my %done;
	RlockTest::wait_until(
		sub {
			for my $s (@s)
			{
				$s->{run}->pump_nb;
				$done{$s} = 1 if $s->{stderr} =~ /40P01/;
			}
			return keys(%done) >= $want;
		},
		20);
	my ($victims, @won) = (0);
	for my $s (@s)
	{
		my ($o, $e) = RlockTest::collect($s);
		$s->{victim} = ($e =~ /40P01/) ? 1 : 0;
		if ($s->{victim}) { $victims++ }
		else { push @won, $o; diag($e) if $e ne '' }
	}
	return ($victims, @won);
}

# Wait (5 s at most) until lock $k is gone from Redis: releases at the
# end of a transaction are queued to the worker, not waited for.
sub gone
{
	my ($k) = @_;
	return RlockTest::wait_until(sub { !$redis->cmd('EXISTS', $k) }, 5);
}

#---- three upgraders ----

for my $case ([ 'one instance', $a, $b, $c ], [ 'two instances', $a, $b, $d ])
{
	my ($name, @s) = @$case;
	my $k = "uw:three:$s[2]{rlock_pid}";
	$_->query_safe("BEGIN; SELECT rlock_try_shared('$k')") for @s;
	for my $s (@s)
	{
		RlockTest::send_query($s, "SELECT rlock_try('$k', '20 s');");
		# the first two wait; the third closes the cycles
		waits($s) if $s != $s[2];
	}
	my ($victims, @won) = outcome(2, @s);
	is($victims, 2, "$name: three upgraders, two victims");
	is_deeply(\@won, ['t'], "$name: the last one upgrades");
	like(hash($k), qr/^:\d+=1,:\d+=1,mode=write$/, "$name: it alone holds the lock, both ways");
	$_->query('ROLLBACK') for @s;
	$_->{stderr} = '' for @s;
	ok(gone($k), "$name: nothing left");
	is(held($k) . held($k, $node2), '', "$name: nor in rlock_locks");
}

#---- an exclusive waiter queued before the upgrader ----

{
	my $k = 'uw:queue';
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k', '0 s', '60 s')");
	$c->query_safe("BEGIN; SELECT rlock_try_shared('$k', '0 s', '60 s')");
	RlockTest::send_query($b, "BEGIN; SELECT rlock_try('$k', '20 s');");
	ok(waits($b), 'an exclusive waiter of the instance');
	my $mon = $redis->monitor;
	RlockTest::send_query($a, "SELECT rlock_try('$k', '20 s'), extract(epoch FROM clock_timestamp());");
	ok(waits($a), 'then the upgrader waits');
	# ten deadlock_timeouts: no victim
	ok(!RlockTest::wait_until(
			sub {
				$_->{run}->pump_nb for ($a, $b);
				return ($a->{stderr} . $b->{stderr}) =~ /40P01/;
			},
			1),
		'no victim');
	# commit the other reader right after one of the upgrader's tries:
	# the next one, a second later, would come too late
	ok(RlockTest::wait_until(
			sub { grep { /"set" "rlock_upgrade:\{\Q$k\E\}"/i } $mon->drain(0.01) }, 3),
		'a try of the waiters');
	my $t0 = time;
	$c->query_safe('COMMIT');
	my ($o, $e) = RlockTest::collect($a);
	like($o, qr/^t\|/, 'the upgrader gets the lock') or diag($e);
	my $took = ($o =~ /^t\|(\d+\.\d+)/ ? $1 : 99) - $t0;
	cmp_ok($took, '<', 0.6, sprintf('at the reader\'s commit (%.2f s)', $took));
	like(hash($k), qr/^:\d+=1,:\d+=1,mode=write$/, 'both holds of the upgrader');
	$a->query_safe('COMMIT');
	($o, $e) = RlockTest::collect($b);
	is($o, 't', 'then the exclusive waiter') or diag($e);
	unlike($e, qr/40P01/, 'which was no victim');
	$b->query_safe('COMMIT');
	ok(gone($k), 'nothing left');
}

#---- two upgraders and an exclusive waiter queued before them ----

# the upgraders make the one cycle: one of them is its victim, never the
# exclusive waiter, which gets the lock after the other upgrader
{
	my $k = 'uw:two';
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	$c->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	RlockTest::send_query($b, "BEGIN; SELECT rlock_try('$k', '20 s');");
	ok(waits($b), 'an exclusive waiter');
	RlockTest::send_query($a, "SELECT rlock_try('$k', '20 s');");
	ok(waits($a), 'an upgrader waits');
	RlockTest::send_query($c, "SELECT rlock_try('$k', '20 s');");
	my ($victims, @won) = outcome(1, $a, $c);
	is($victims, 1, 'one victim among the upgraders');
	is_deeply(\@won, ['t'], 'the other upgrades');
	$_->query('COMMIT') for ($a, $c);
	$_->{stderr} = '' for ($a, $c);
	my ($o, $e) = RlockTest::collect($b);
	is($o, 't', 'then the exclusive waiter gets the lock') or diag($e);
	unlike($e, qr/40P01/, 'no victim there');
	$b->query_safe('COMMIT');
	ok(gone($k), 'nothing left');
}

#---- upgrade waits ended by timeouts, cancel, terminate ----

{
	my $k = 'uw:int';
	my $x = RlockTest::session($node);
	my @ends = (
		[ 'lock_timeout', "SET lock_timeout = '300ms';", qr/55P03/ ],
		[ 'statement_timeout', "SET statement_timeout = '300ms';", qr/57014/ ],
		[ 'pg_cancel_backend', '', qr/57014/, 'pg_cancel_backend' ],
		[ 'pg_terminate_backend', '', undef, 'pg_terminate_backend' ]);
	$c->query_safe("SELECT rlock_session_try_shared('$k')");
	for my $end (@ends)
	{
		my ($name, $set, $err, $fn) = @$end;
		$x->query_safe("RESET lock_timeout; RESET statement_timeout; SELECT rlock_session_try_shared('$k')");
		RlockTest::send_query($x, "$set SELECT rlock_lock('$k');");
		ok(waits($x), "$name: the upgrade waits");
		sql("SELECT $fn($x->{rlock_pid})") if $fn;
		if ($err)
		{
			my ($o, $e) = RlockTest::collect($x);
			like($e, $err, "$name: ends the wait");
			is(held($k), 'shared/session/1,shared/session/1', "$name: both shared holds stay, nothing else");
			like(hash($k), qr/^:\d+=1,:\d+=1,mode=read$/, "$name: in Redis too");
			is($x->query_safe("SELECT rlock_session_release_shared('$k')"), 't', "$name: released");
		}
		else
		{
			ok(RlockTest::wait_until(sub { held($k) eq 'shared/session/1' }, 10),
				"$name: the session's holds are gone");
			$x = RlockTest::session($node);
		}
		ok(RlockTest::wait_until(sub { hash($k) =~ /^:\d+=1,mode=read$/ }, 5),
			"$name: the other reader alone in Redis");
		cmp_ok($redis->cmd('PTTL', "rlock_upgrade:{$k}"), '<=', 2000, "$name: the mark ends within 2 s");
		ok(RlockTest::wait_until(sub { !$redis->cmd('EXISTS', "rlock_upgrade:{$k}") }, 5),
			"$name: and is gone");
	}
	$c->query_safe("SELECT rlock_session_release_shared('$k')");
	ok(gone($k), 'nothing left');
	$x->quit;
}

#---- the other reader's session hold given back ----

{
	my $k = 'uw:sess';
	$c->query_safe("SELECT rlock_session_try_shared('$k', '0 s', '60 s')");
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k', '0 s', '60 s')");
	RlockTest::send_query($a, "SELECT rlock_try('$k', '20 s'), extract(epoch FROM clock_timestamp());");
	ok(waits($a), 'upgrade waits for a session-scope reader');
	my $t0 = time;
	is($c->query_safe("SELECT rlock_session_release_shared('$k')"), 't', 'rlock_session_release_shared');
	my ($o, $e) = RlockTest::collect($a);
	like($o, qr/^t\|/, 'the upgrader gets the lock') or diag($e);
	cmp_ok(($o =~ /^t\|(\d+\.\d+)/ ? $1 : 99) - $t0, '<', 1.5, 'promptly');
	$a->query_safe('COMMIT');
	ok(gone($k), 'nothing left');
}

#---- session forms: a token, a lock_timeout ----

{
	my $k = 'uw:stok';
	my $t1 = $b->query_safe("BEGIN; SELECT rlock_try_token('$k'); COMMIT");
	$a->query_safe("SELECT rlock_session_try_shared('$k')");
	$c->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	RlockTest::send_query($a, "SELECT rlock_session_try_token('$k', '20 s');");
	ok(waits($a), 'a session-scope upgrade for a token waits');
	$c->query_safe('COMMIT');
	my ($o, $e) = RlockTest::collect($a);
	cmp_ok($o =~ /^\d+$/ ? $o : 0, '>', $t1, 'it gets the lock and a new token') or diag($e);
	is(held($k), 'exclusive/session/1,shared/session/1', 'both session holds');
	is($a->query_safe("SELECT rlock_session_release('$k')"), 't', 'the exclusive one given back');
	like(hash($k), qr/^:\d+=1,mode=read$/, 'a read lock again');

	$c->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	RlockTest::send_query($a, "SET lock_timeout = '300ms'; SELECT rlock_session_lock('$k');");
	($o, $e) = RlockTest::collect($a);
	like($e, qr/55P03/, 'rlock_session_lock: lock_timeout ends the upgrade wait');
	is(held($k), 'shared/session/1,shared/transaction/1', 'the shared holds stay, nothing else');
	$c->query_safe('COMMIT');
	$a->query_safe("RESET lock_timeout; SELECT rlock_session_release_shared('$k')");
	ok(gone($k), 'nothing left');
}

#---- a reader whose release publishes nothing ----

# a Redisson reader's unlock says nothing while a reader remains: the
# upgrader's tries, at least every second, find the lock free of it
{
	my $k = 'uw:quiet';
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k', '0 s', '60 s')");
	my $field = '0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0:1';
	$redis->cmd('HSET', $k, $field, 1);
	$redis->cmd('SET', "{$k}:$field:rwlock_timeout:1", 1, 'PX', 60000);
	RlockTest::send_query($a, "SELECT rlock_try('$k', '20 s'), extract(epoch FROM clock_timestamp());");
	ok(waits($a), 'the upgrade waits for a foreign reader');
	my $t0 = time;
	$redis->cmd('HDEL', $k, $field);
	$redis->cmd('DEL', "{$k}:$field:rwlock_timeout:1");
	my ($o, $e) = RlockTest::collect($a);
	like($o, qr/^t\|/, 'it upgrades once the reader is gone') or diag($e);
	my $took = ($o =~ /^t\|(\d+\.\d+)/ ? $1 : 99) - $t0;
	cmp_ok($took, '<', 1.8, sprintf('within its second (%.2f s)', $took));
	$a->query_safe('COMMIT');
	ok(gone($k), 'nothing left');
}

#---- a reader whose lease ran out ----

# a reader with an explicit lease holds the lock until it runs out, not
# until its session gives it back: the upgrade waits for that, not more
{
	my $k = 'uw:lease';
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	$c->query_safe("BEGIN; SELECT rlock_try_shared('$k', '0 s', '1 s')");
	my $t0 = time;
	RlockTest::send_query($a, "SELECT rlock_try('$k', '6 s'), extract(epoch FROM clock_timestamp());");
	my ($o, $e) = RlockTest::collect($a);
	like($o, qr/^t\|/, 'the upgrade is granted once the other reader\'s lease ran out') or diag($e);
	my $took = ($o =~ /^t\|(\d+\.\d+)/ ? $1 : 99) - $t0;
	cmp_ok($took, '<', 3, sprintf('within a second of it (%.2f s)', $took));
	like(hash($k), qr/^:\d+=1,:\d+=1,mode=write$/, 'the lapsed reader\'s field is gone');
	$a->query_safe('COMMIT');
	$c->query('COMMIT');
	like($c->{stderr}, qr/40001/, 'the lapsed reader is told at its commit');
	$c->{stderr} = '';
	ok(gone($k), 'nothing left');
}

#---- the other reader ends otherwise ----

{
	# its backend terminated: its holds are given back, the upgrade gets in
	my $k = 'uw:term';
	my $x = RlockTest::session($node);
	$x->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	RlockTest::send_query($a, "SELECT rlock_try('$k', '20 s');");
	ok(waits($a), 'the upgrade waits');
	sql("SELECT pg_terminate_backend($x->{rlock_pid})");
	my ($o, $e) = RlockTest::collect($a);
	is($o, 't', 'the other reader terminated: the upgrade gets in') or diag($e);
	$a->query_safe('COMMIT');
	ok(gone($k), 'nothing left');

	# it waits for a row the upgrader holds: a cycle, one victim, the
	# upgrader (the other's wait is PostgreSQL's), and the reader goes on
	$k = 'uw:row';
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k'); UPDATE t SET v = v + 1 WHERE id = 1");
	$c->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	RlockTest::send_query($a, "SELECT rlock_try('$k', '20 s');");
	ok(waits($a), 'the upgrade waits');
	RlockTest::send_query($c, "UPDATE t SET v = v + 1 WHERE id = 1;");
	my ($victims, @won) = outcome(1, $a, $c);
	is($victims, 1, 'a cycle through a row: one victim');
	ok($a->{victim}, 'the upgrader is the victim');
	$a->query('ROLLBACK');
	$a->{stderr} = '';
	$c->query_safe('COMMIT');
	ok(gone($k), 'nothing left');
}

#---- Redis restarted under a waiting upgrade ----

{
	my $k = 'uw:restart';
	$c->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	RlockTest::send_query($a, "SELECT rlock_try('$k', '8 s');");
	ok(waits($a), 'the upgrade waits');
	$redis->restart;
	ok(RlockTest::wait_for_redis($node, 20), 'the worker is back');
	$c->query('COMMIT');
	$c->{stderr} = '';
	my ($o, $e) = RlockTest::collect($a);
	unlike($e, qr/40P01/, 'no 40P01 for the upgrader');
	ok($o eq 't' || $o eq 'f' || $e ne '', 'the wait ends');
	# its shared hold went with Redis's data: the commit says so, or
	# succeeds; either way nothing stays
	$a->query('COMMIT');
	like($a->{stderr}, qr/^$|40001/, 'the commit: done, or the lost hold told (40001)');
	$a->{stderr} = '';
	ok(RlockTest::wait_until(sub { !$redis->cmd('EXISTS', $k) && held($k) eq '' }, 10),
		'nothing left');
}

#---- a slow reader, deadlock_timeout 100 ms ----

for my $case ([ 'local reader', $c ], [ 'reader of the other instance', $d ])
{
	my ($name, $r) = @$case;
	my $k = "uw:slow:$r->{rlock_pid}";
	$a->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	$r->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	RlockTest::send_query($a, "SELECT rlock_lock('$k');");
	ok(waits($a), "$name: the upgrade waits");
	ok(!RlockTest::wait_until(
			sub { $a->{run}->pump_nb; $a->{stderr} =~ /40P01/ }, 2),
		"$name: twenty deadlock_timeouts, no 40P01");
	$r->query_safe('COMMIT');
	my ($o, $e) = RlockTest::collect($a);
	is($e, '', "$name: the upgrade at the reader's commit");
	like(hash($k), qr/^:\d+=1,:\d+=1,mode=write$/, "$name: both holds");
	$a->query_safe('COMMIT');
	ok(gone($k), "$name: nothing left");
}

$_->quit for ($a, $b, $c, $d);
done_testing();
