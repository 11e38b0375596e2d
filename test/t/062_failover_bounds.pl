# Every call ends within its bound behind Sentinels and in a Redis
# Cluster, while the primary is out of reach but a Sentinel or a map node
# answers:
#
# - a primary the Sentinels name that rlock cannot use (another
#   password): rlock_lock without a timeout and rlock_try with a 4 s wait
#   fail with 58030 after rlock.connect_timeout, naming the address and
#   the cause, not at statement_timeout or the end of the wait;
# - a waiter (told the lock is busy) keeps its place while the primary is
#   away, for rlock.failover_timeout at most: a primary that stays out
#   of reach (frozen, no replica to promote) ends a wait without limit
#   with 58030;
# - the same in a Redis Cluster, a primary frozen with no failover.
use strict;
use warnings;

use File::Temp ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Sentinel;

plan skip_all => 'the bounds do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $dir = File::Temp::tempdir(CLEANUP => 1);

#---- Sentinel: a primary named but not usable ----

my $dep = RlockTest::Sentinel->start(replicas => 0, sentinels => 1,
	data_password => 'datapw', down_after_ms => 1000);
my $wrong = RlockTest::password_file($dir, 'not-the-password');
my $node = RlockTest::node('bounds', $dep->data_nodes->[0],
	conf => [
		"rlock.topology = 'sentinel'",
		"rlock.nodes = '" . $dep->nodes_setting . "'",
		"rlock.sentinel_master = '" . $dep->master_name . "'",
		"rlock.password_file = '$wrong'",
		"rlock.failover_timeout = '3s'",
		'statement_timeout = 0' ]);
ok(RlockTest::wait_until(
		sub { $node->safe_psql('postgres', 'SELECT sentinel IS NOT NULL FROM rlock_status()') eq 't' },
		20),
	'a Sentinel answers');
my $address = '127.0.0.1:' . $dep->data_nodes->[0]->rlock_port;
for my $call ("rlock_lock('b:k')", "rlock_try('b:k', '4 s')")
{
	my ($rc, $out, $err, $took) = RlockTest::timed_psql($node,
		"BEGIN; SELECT $call; COMMIT");
	like($err, qr/ERROR:  58030: could not reach Redis for lock "b:k"\n.*DETAIL:  No usable connection to Redis at \Q$address\E: .*(WRONGPASS|invalid username-password)/s,
		"$call: 58030 naming the primary and why");
	cmp_ok($took, '<', 3, sprintf('%s: after rlock.connect_timeout (%.1f s), not at the end of its wait', $call, $took));
}

#---- Sentinel: a waiter's place, for rlock.failover_timeout ----

RlockTest::password_file($dir, 'datapw');
$node->reload;
ok(RlockTest::wait_for_redis($node, 20), 'the right password: rlock reaches the primary');
my $holder = $node->background_psql('postgres');
is($holder->query_safe("SELECT rlock_session_try('b:w')"), 't', 'a lock is held');
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($waiter, "\\set VERBOSITY verbose\nSELECT rlock_session_lock('b:w');");
ok(RlockTest::waiting_in_sql($node, 'b:w'), 'a session waits for it, without a limit');
my $primary = $dep->primary;
$primary->freeze;	# no replica: the Sentinels keep naming it
my $t0 = time;
my ($out, $err) = RlockTest::collect($waiter);
my $took = time - $t0;
like($err, qr/ERROR:  58030: could not reach Redis for lock "b:w"/,
	'the primary stays out of reach: the waiter fails with 58030');
cmp_ok($took, '<', 10, sprintf('after rlock.failover_timeout (3 s) and the connection bounds (%.1f s)', $took));
$primary->thaw;
$holder->quit;
$waiter->quit;
$node->stop;
$dep->stop;

#---- Redis Cluster: a primary frozen, not failed over ----

my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 0,
	node_timeout_ms => 60000);
my @primaries = $cluster->primaries;
my $cnode = RlockTest::node('cbounds', $primaries[0],
	conf => [
		"rlock.topology = 'cluster'",
		"rlock.nodes = '127.0.0.1:" . $primaries[0]->rlock_port . "'",
		"rlock.failover_timeout = '3s'" ]);
ok(RlockTest::wait_for_cluster_map($cnode, 3), 'the map of three primaries');
my $key;
for my $i (1 .. 1000)
{
	next unless $cluster->owner($cluster->slot("cb:$i"))->port == $primaries[1]->port;
	$key = "cb:$i";
	last;
}
$holder = $cnode->background_psql('postgres');
is($holder->query_safe("SELECT rlock_session_try('$key')"), 't', 'a lock on the second primary is held');
$waiter = $cnode->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($waiter, "\\set VERBOSITY verbose\nSELECT rlock_session_lock('$key');");
ok(RlockTest::waiting_in_sql($cnode, $key), 'a session waits for it, without a limit');
$primaries[1]->freeze;
$t0 = time;
($out, $err) = RlockTest::collect($waiter);
$took = time - $t0;
like($err, qr/ERROR:  58030: could not reach Redis for lock "\Q$key\E"/,
	'the primary stays out of reach while the map node answers: 58030');
cmp_ok($took, '<', 10, sprintf('within rlock.failover_timeout and the connection bounds (%.1f s)', $took));
$primaries[1]->thaw;
$holder->quit;
$waiter->quit;
$cnode->stop;
$cluster->stop;
done_testing();
