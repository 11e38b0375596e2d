# Review of shared holds (077): what was tried to break them.
#
# - a session holding a key exclusively twice and shared three times
#   whose Redis connections are killed, with one release of each mode on
#   the way: both counts restated (1 and 2), one timeout key, nothing
#   left after rlock_release_all();
# - a backend that exits holding both modes (either order of taking)
#   leaves neither the hash nor the timeout key;
# - savepoints: a shared hold taken and an exclusive one given back inside
#   a savepoint that rolls back; a shared hold re-entered in a savepoint
#   that rolls back (the exclusive hold stays alone); a procedure that
#   commits between holds of both modes;
# - six readers waiting behind a writer, one cancelled just before or
#   just after the writer's commit: the other five get in at once;
# - Redis Cluster: a slot migration that has moved a shared hold's
#   timeout key but not its hash.  Redis refuses a script that reads a
#   key its node no longer has: the renewal batch of the primary must not
#   fail as a whole, or every other lock there goes unrenewed (a fix of
#   kinds/batch.lua; the split hold itself is counted lost, its commit
#   fails with 40001).
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Cluster;

plan skip_all => 'TLS round not needed' if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('sharedrev', $redis,
	conf => [ 'rlock.watchdog_timeout = 3000' ]);

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->{rlock_pid} = $s->query_safe('SELECT pg_backend_pid()');
	return $s;
}

sub fields
{
	my ($key) = @_;
	my %h = @{ $redis->cmd('HGETALL', $key) };
	return \%h;
}

sub dump_key
{
	my ($key) = @_;
	my $h = fields($key);
	return join(' ', map { "$_=$h->{$_}" } sort keys %$h)
	  . ' timeouts=' . join(',', sort @{ $redis->cmd('KEYS', '*rwlock_timeout*') });
}

sub state_of
{
	my ($key) = @_;
	return sql("SELECT string_agg(state, ',' ORDER BY state) FROM rlock_locks WHERE key = '$key'") // '';
}

# ---- resync after CLIENT KILL: counts of both modes restated ----
{
	my $key = 'rv:resync';
	my $s = session();
	$s->query_safe("SELECT rlock_session_try('$key'), rlock_session_try('$key'), rlock_session_try_shared('$key'), rlock_session_try_shared('$key'), rlock_session_try_shared('$key')");
	$redis->cmd('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
	# a release of one of each while reconnecting
	$s->query("SELECT rlock_session_release_shared('$key'), rlock_session_release('$key')");
	$s->{stderr} = '';
	ok(RlockTest::wait_for_redis($node, 10), 'reconnected');
	my $h;
	RlockTest::wait_until(sub {
		$h = fields($key);
		my @c = sort map { $h->{$_} } grep { $_ ne 'mode' } keys %$h;
		return "@c" eq '1 2';
	}, 10);
	my @c = sort map { $h->{$_} } grep { $_ ne 'mode' } keys %$h;
	is_deeply(\@c, [1, 2], 'counts 1 exclusive, 2 shared restated');
	is($s->query_safe("SELECT rlock_held('$key'), rlock_held_shared('$key')"), "1|2", 'session counts');
	$s->query_safe("SELECT rlock_session_release('$key')");
	is($redis->cmd('HGET', $key, 'mode'), 'read', 'read lock after the exclusive goes');
	$s->query_safe("SELECT rlock_release_all()");
	ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $key) == 0 && @{ $redis->cmd('KEYS', '*rwlock_timeout*') } == 0 }, 10),
		'nothing left') or diag(dump_key($key));
	$s->quit;
}

# ---- backend exit holding both ----
for my $order ('x-first', 's-first')
{
	my $key = "rv:exit:$order";
	my $s = session();
	my $q = $order eq 'x-first'
	  ? "SELECT rlock_session_try('$key'), rlock_session_try_shared('$key')"
	  : "SELECT rlock_session_try('$key'), rlock_try_shared('$key', '0', '30 s')";
	$s->query_safe("BEGIN; $q");
	sql("SELECT pg_terminate_backend($s->{rlock_pid})");
	ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $key) == 0 && @{ $redis->cmd('KEYS', '*rwlock_timeout*') } == 0 }, 10),
		"$order: backend exit leaves nothing") or diag(dump_key($key));
	eval { $s->quit };
}

# ---- savepoints ----
{
	my $key = 'rv:sp1';
	my $s = session();
	$s->query_safe("BEGIN; SELECT rlock_session_try('$key'); SAVEPOINT a; SELECT rlock_try_shared('$key'); SELECT rlock_session_release('$key')");
	is($redis->cmd('HGET', $key, 'mode'), 'read', 'sp1: read lock');
	$s->query("ROLLBACK TO a");
	ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $key) == 0 }, 5), 'sp1: rollback to frees it')
	  or diag(dump_key($key));
	$s->query_safe('COMMIT');
	$key = 'rv:sp2';
	$s->query_safe("BEGIN; SELECT rlock_try('$key'); SAVEPOINT a; SELECT rlock_try_shared('$key'); SELECT rlock_try_shared('$key')");
	$s->query("ROLLBACK TO a");
	ok(RlockTest::wait_until(sub { scalar(keys %{ fields($key) }) == 2 }, 5), 'rollback to: the shared field goes')
	  or diag(dump_key($key));
	is(sql("SELECT rlock_try_shared('$key', '0')"), 'f', 'no other reader');
	$s->query_safe("SAVEPOINT b; SELECT rlock_try_shared('$key'); RELEASE SAVEPOINT b; SELECT rlock_release('$key')");
	is($redis->cmd('HGET', $key, 'mode'), 'read', 'read after exclusive release');
	$s->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $key) == 0 && @{ $redis->cmd('KEYS', '*rwlock_timeout*') } == 0 }, 5), 'gone after commit') or diag(dump_key($key));
	$s->quit;
}

# ---- procedure with COMMIT ----
{
	sql(q{CREATE PROCEDURE p(k text) LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM rlock_try_shared(k);
		PERFORM rlock_try(k || 'x');
		COMMIT;
		PERFORM rlock_try(k);
		PERFORM rlock_try_shared(k || 'x');
		COMMIT;
		PERFORM rlock_try_shared(k);
		PERFORM rlock_try_shared(k);
	END $$});
	my $s = session();
	$s->query_safe("CALL p('rv:proc')");
	ok(RlockTest::wait_until(sub { @{ $redis->cmd('KEYS', 'rv:proc*') } == 0 && @{ $redis->cmd('KEYS', '*rwlock_timeout*') } == 0 }, 5), 'procedure leaves nothing') or diag(join ' ', @{ $redis->cmd('KEYS', '*') });
	$s->quit;
}

# ---- readers waiting behind a writer, one cancelled at the grant ----
for my $round (1 .. 3)
{
	my $key = "rv:cancel:$round";
	my $w = session();
	$w->query_safe("BEGIN; SELECT rlock_try('$key', '0', '60 s')");
	my @r = map { session() } 1 .. 6;
	RlockTest::send_query($_, "BEGIN; SELECT rlock_try_shared('$key', '30 s', '60 s');") for @r;
	ok(RlockTest::wait_until(sub { state_of($key) eq 'held' . (',waiting' x 6) }, 10), "round $round: six readers wait");
	my $victim = $r[$round]{rlock_pid};
	if ($round == 1) { sql("SELECT pg_cancel_backend($victim)"); $w->query_safe('COMMIT'); }
	elsif ($round == 2) { $w->query_safe('COMMIT'); sql("SELECT pg_cancel_backend($victim)"); }
	else { sql("SELECT pg_cancel_backend($victim); SELECT pg_sleep(0.001);"); $w->query_safe('COMMIT'); }
	my $t0 = time;
	ok(RlockTest::wait_until(sub { my $st = state_of($key); $st eq 'held,held,held,held,held' || $st eq 'held,held,held,held,held,held' }, 10),
		"round $round: the others get in") or diag(state_of($key));
	cmp_ok(time - $t0, '<', 10, "round $round: at once");
	for (@r) { RlockTest::collect($_); $_->query('COMMIT'); $_->quit; }
	$w->quit;
	ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $key) == 0 }, 10), "round $round: gone");
}

# ---- Redis Cluster: a shared hold split by a slot migration ----
#
# A slot migration moves a shared hold's hash and its timeout key one at a
# time.  While they are on two nodes, the batch script that renews (and
# checks) every lock of the hash's primary must not fail as a whole: the
# exclusive locks of other slots on that primary would not be renewed and
# would expire under their sessions.
{
	my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 0);
	my @primaries = $cluster->primaries;
	my $nc = RlockTest::node('sharedrev_c', $primaries[0],
		conf => [
			"rlock.topology = 'cluster'",
			"rlock.nodes = '" . join(',', map { '127.0.0.1:' . $_->port } @primaries) . "'",
			"rlock.watchdog_timeout = '3s'" ]);
	ok(RlockTest::wait_for_cluster_map($nc, 3), 'Cluster: the slot map');
	my $own = sub { $cluster->owner($cluster->slot($_[0])) };
	my ($y) = grep { $own->($_) == $primaries[0] } map { "rv:split:$_" } 1 .. 100;
	my ($x) = grep { $own->($_) == $primaries[0] && $cluster->slot($_) != $cluster->slot($y) }
	  map { "rv:other:$_" } 1 .. 100;
	my $sx = $nc->background_psql('postgres', on_error_stop => 0);
	my $sy = $nc->background_psql('postgres', on_error_stop => 0);
	$sx->query_safe("BEGIN; SELECT rlock_try('$x')");
	$sy->query_safe("BEGIN; SELECT rlock_try_shared('$y')");
	my %h = @{ $primaries[0]->cmd('HGETALL', $y) };
	my ($field) = grep { $_ ne 'mode' } keys %h;
	my $timeout = "{$y}:$field:rwlock_timeout:1";
	is($primaries[0]->cmd('EXISTS', $timeout), 1, 'Cluster: the shared hold\'s timeout key');

	# the timeout key moves first, the hash stays behind
	my $log_from = -s $nc->logfile;
	my $slot = $cluster->slot($y);
	$cluster->migrate_begin($slot, $primaries[1]);
	my $r = $primaries[0]->cmd('MIGRATE', '127.0.0.1', $cluster->cport($primaries[1]), $timeout, 0, 5000);
	is($r, 'OK', 'Cluster: the timeout key migrated, the hash not yet');
	# three leases of 3 s: an unrenewed lock is gone by then
	my $t_end = time + 9;
	my $x_alive = 1;
	while (time < $t_end)
	{
		$x_alive = 0 if $primaries[0]->cmd('EXISTS', $x) == 0;
		select(undef, undef, undef, 0.2);
	}
	ok($x_alive, 'Cluster: a lock of another slot on that primary is renewed all along');
	my $log = PostgreSQL::Test::Utils::slurp_file($nc->logfile, $log_from);
	unlike($log, qr/refused to renew/,
		'Cluster: no renewal of the primary\'s locks is refused meanwhile');
	$sx->query('COMMIT');
	is($sx->{stderr}, '', 'Cluster: and its transaction commits');
	$sx->{stderr} = '';
	$cluster->migrate_keys($slot);
	$cluster->migrate_end($slot);
	$sy->query('COMMIT');
	$sy->{stderr} = '';
	ok(RlockTest::wait_until(sub { !grep { @{ $_->cmd('KEYS', 'rv:*') } || @{ $_->cmd('KEYS', '{rv:*') } } @primaries }, 10),
		'Cluster: nothing left');
	$_->quit for $sx, $sy;
}

done_testing();
