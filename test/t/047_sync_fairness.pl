# Local waiters are served in their turn when acquisitions wait for a
# replica (rlock.sync_replicas = auto, the default, with a replica
# attached): eight sessions looping over one hot key each commit a fair
# share, and none waits for long, as with sync_replicas = off.  The
# acquisitions of one pass wait for one WAIT together; a waiter handed
# the lock, or woken, while a WAIT is on the wire must keep its place in
# the line rather than sleep until its wait or the lease runs out.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Proxy;
use RlockTest::Redis;

plan skip_all => 'the line does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $replica = $redis->start_replica;

my $node = RlockTest::node('fair', $redis,
	conf => [ 'log_min_messages = warning', 'log_statement = none' ]);

sub status
{
	return $node->safe_psql('postgres', "SELECT $_[0] FROM rlock_status()");
}

ok(RlockTest::wait_until(sub { status('sync_connection') eq 'ready' }, 20),
	'rlock waits for the replica (auto found it)');

# the same load with acquisitions not synced, as the yardstick
$node->append_conf('postgresql.conf', 'rlock.sync_replicas = off');
$node->reload;
ok(RlockTest::wait_until(sub { status('sync_connection') eq 'unused' }, 10),
	'sync_replicas = off: no waiting for the replica');
my $off = RlockTest::hot_key_load($node, 'fair:hot');
note sprintf('off: %d transactions, fewest per client %d, longest %.0f ms',
	$off->{total}, $off->{min_count}, $off->{max_ms});

$node->append_conf('postgresql.conf', 'rlock.sync_replicas = auto');
$node->reload;
ok(RlockTest::wait_until(sub { status('sync_connection') eq 'ready' }, 20),
	'back to auto: acquisitions wait for the replica');
my $auto = RlockTest::hot_key_load($node, 'fair:hot');
note sprintf('auto: %d transactions, fewest per client %d, longest %.0f ms',
	$auto->{total}, $auto->{min_count}, $auto->{max_ms});
note join(', ', map { "client $_: $auto->{clients}{$_}{count}" }
	  sort { $a <=> $b } keys %{ $auto->{clients} });

is($node->safe_psql('postgres', 'SELECT n FROM hot_row'), $auto->{total},
	'every committed transaction held the lock (no lost update)');
cmp_ok($auto->{total}, '>=', 80, 'the hot key was handed around');
# served in turn: each client commits about an eighth of the total
cmp_ok($auto->{min_count}, '>=', $auto->{total} / 8 / 4,
	'every session committed at least a quarter of its fair share');
# a starved waiter sits out the whole run (or its 30 s wait)
cmp_ok($auto->{max_ms}, '<', 2000,
	'no transaction waited two seconds for the lock');
cmp_ok($auto->{max_ms}, '<', 20 * $off->{max_ms} + 500,
	'the longest wait stays within a small multiple of sync_replicas = off');

$node->stop;

# The hand-off, step by step, through a relay that holds back what the
# command connection sends.  A releases; its release goes on the command
# connection and is held there.  B, first in line, is handed the lock:
# its try, synced, goes on the sync connection, which orders nothing
# against the command connection, so it waits for the release's answer
# (otherwise it meets the lock still held, and since the release's unlock
# message is let pass as the hand-off's echo, it sleeps for A's whole
# lease).  C, arriving meanwhile, joins the line behind B without trying.
my $proxy = RlockTest::Proxy->start($redis->port);
my $relayed = RlockTest::node('handoff', $redis,
	command_timeout => '10s',
	conf => [ 'rlock.port = ' . $proxy->port ]);
ok(RlockTest::wait_until(
		sub {
			$relayed->safe_psql('postgres',
				'SELECT command_connection, sync_connection FROM rlock_status()')
			  eq 'ready|ready';
		},
		20),
	'through the relay: command and sync connections ready');
my ($a, $b, $c) = map { $relayed->background_psql('postgres', on_error_stop => 0) } 1 .. 3;
is($a->query_safe("SELECT rlock_session_try('hand:k')"), 't', 'A holds the lock');

# the tries Redis runs on the key, as MONITOR shows them
my $mon = $redis->monitor;
my $tries = 0;
sub count_tries
{
	$tries += grep { /"EVALSHA" .*"hand:k"/ } RlockTest::Resp::drain($mon, 0.05);
	return $tries;
}

# B tries, subscribes, tries again once subscribed, then waits
RlockTest::send_query($b, "SELECT rlock_session_try('hand:k', '8 s');");
ok(RlockTest::wait_until(
		sub { count_tries() >= 2 && $redis->subscribers('hand:k') == 1 }, 10),
	'B tried twice, the second time once subscribed');
ok(RlockTest::waiting_in_sql($relayed, 'hand:k'), 'B waits in line');

is($proxy->hold('rlock_command'), 1, 'the command connection is held back');
my $tries_before = count_tries();
RlockTest::send_query($a, "SELECT rlock_session_release('hand:k');");
RlockTest::send_query($c, "SELECT rlock_session_try('hand:k', '8 s');");
ok(RlockTest::wait_until(
		sub {
			$relayed->safe_psql('postgres',
				"SELECT count(*) FROM rlock_locks WHERE key = 'hand:k' AND state = 'waiting'")
			  == 2;
		},
		10),
	'C is in line too');
# a try goes on the sync connection, which is not held back
ok(!RlockTest::wait_until(sub { count_tries() > $tries_before }, 1),
	'while the release is unanswered, neither B (handed the lock) nor C (behind B) tries');
is(scalar @{ $redis->owners('hand:k') }, 1, 'A still holds the lock in Redis');

is($proxy->resume(10), 'resumed', 'the release reaches Redis');
my ($out) = RlockTest::collect($b);
is($out, 't', 'B is granted the lock it was handed, at once');
is($relayed->safe_psql('postgres',
		"SELECT count(*) FROM rlock_locks WHERE key = 'hand:k' AND state = 'waiting'"),
	1, 'C waits behind B');
$b->query_safe("SELECT rlock_session_release('hand:k')");
($out) = RlockTest::collect($c);
is($out, 't', 'then C, when B lets go');
($out) = RlockTest::collect($a);
is($out, 't', "A's release was answered");
$_->quit for ($a, $b, $c);
$relayed->stop;
$proxy->stop;
$replica->stop;
$redis->stop;
done_testing();
