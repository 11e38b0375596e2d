# Deadlocks across instances in a Redis Cluster, and the graph's entries
# when things fail (rlock.deadlock_detection = global, worker/wfg.c).
#
# - a Sentinel failover right after a cycle closed: one victim after, and
#   only one;
# - a Redis Cluster of three primaries: the two locks of a cycle on two
#   of them, the graph's slot on the third: one victim;
# - an instance stopped at once (immediate shutdown) while its waits are
#   in the graph: its entries are gone within their life (three
#   deadlock_timeouts) and no session of the other instance fails;
# - Redis restarted while a cycle waits: with its data (the locks and the
#   graph), one victim after; empty, no victim (no lock is held), each
#   commit finds its lock lost.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Redis;
use RlockTest::Sentinel;
use RlockTest::TLS;

plan skip_all => 'the search needs no TLS of its own: the plain round runs this'
  if RlockTest::TLS::everywhere();

sub global
{
	my (@nodes) = @_;
	for my $n (@nodes)
	{
		$n->safe_psql('postgres',
			"ALTER SYSTEM SET deadlock_timeout = '300ms'; "
			  . "ALTER SYSTEM SET rlock.deadlock_detection = global; SELECT pg_reload_conf()");
	}
}

# The sessions of @sessions that fail with 40P01 within 15 s
sub victims
{
	my ($v) = RlockTest::deadlock_victims(\@_, time);
	return @$v;
}

# $x holds $k1, $y holds $k2, each then waits for the other's
sub cross
{
	my ($x, $y, $k1, $k2, $node_x) = @_;
	$x->query_safe("BEGIN; SELECT rlock_try('$k1')");
	$y->query_safe("BEGIN; SELECT rlock_try('$k2')");
	RlockTest::send_query($x, "SELECT rlock_try('$k2', '60 s'); COMMIT;");
	RlockTest::waiting_in_sql($node_x, $k2);
	RlockTest::send_query($y, "SELECT rlock_try('$k1', '60 s'); COMMIT;");
}

#---- a Sentinel failover while a cycle waits ----
{
	my ($dep, $na, $nb) = RlockTest::sentinel_nodes('s1', 's2');
	global($na, $nb);
	my $x = RlockTest::session($na);
	my $y = RlockTest::session($nb);
	cross($x, $y, 'sf:1', 'sf:2', $na);
	RlockTest::waiting_in_sql($nb, 'sf:1');
	# the graph's writes are not waited for by replicas: some may be lost,
	# and are written again by the next search
	my $new = $dep->failover(timeout => 30);
	my @v = victims($x, $y);
	is(scalar @v, 1, 'Sentinel failover while a cycle waits: one victim after');
	my $other = @v && $v[0] == $x ? $y : $x;
	RlockTest::collect($_) for @v;
	# (it may fail with 58030 instead: with rlock.sync_replicas = 1, its
	# grant waits for a replica of the new primary, which may not be
	# online yet)
	my ($out, $err) = RlockTest::collect($other);
	unlike($err, qr/40P01/, 'the other session is no victim');
	$_->quit for ($x, $y);
	$_->stop for ($na, $nb);
	$dep->stop;
}

#---- a Redis Cluster ----
{
	my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 0);
	my @primaries = $cluster->primaries;
	my ($n1, $n2) = RlockTest::cluster_nodes($cluster, 'c1', 'c2');
	global($n1, $n2);
	my $graph = $cluster->owner($cluster->slot('rlock_wfg:{rlock_wfg}:nodes'));
	my %key;
	for my $i (0 .. 400)
	{
		my $owner = $cluster->owner($cluster->slot("cg:$i"));
		next if $owner->port == $graph->port;
		$key{ $owner->port } //= "cg:$i";
	}
	my ($k1, $k2) = values %key;
	my $x = RlockTest::session($n1);
	my $y = RlockTest::session($n2);
	cross($x, $y, $k1, $k2, $n1);
	my @v = victims($x, $y);
	is(scalar @v, 1, 'Redis Cluster: the locks on two primaries, the graph on a third: one victim');
	my $other = @v && $v[0] == $x ? $y : $x;
	RlockTest::collect($_) for @v;
	my ($out, $err) = RlockTest::collect($other);
	unlike($err, qr/ERROR/, 'the other session commits');
	$_->quit for ($x, $y);
	$_->stop for ($n1, $n2);
	$cluster->stop;
}

my $redis = RlockTest::Redis->start;
my $n1 = RlockTest::node('one', $redis);
my $n2 = RlockTest::node('two', $redis);
global($n1, $n2);

#---- an instance killed with its waits in the graph ----
{
	my $x = RlockTest::session($n1);
	my $y = RlockTest::session($n2);
	# y holds f:1; x waits for it: x's wait goes into the graph
	$y->query_safe("BEGIN; SELECT rlock_try('f:1')");
	RlockTest::send_query($x, "SELECT rlock_try('f:1', '60 s');");
	ok( RlockTest::wait_until(
			sub { $redis->cmd('HLEN', 'rlock_wfg:{rlock_wfg}:nodes') == 1 }, 10),
		"the waiting session of instance one is in the graph");
	# an immediate shutdown: nothing of the instance says goodbye
	$x->{run}->kill_kill;
	$n1->stop('immediate');
	my $t0 = time;
	ok( RlockTest::wait_until(
			sub { $redis->cmd('HLEN', 'rlock_wfg:{rlock_wfg}:nodes') == 0 }, 10),
		'its entry is gone');
	cmp_ok(time - $t0, "<", 3 * 0.3 + 1.5,
		'within its life (three deadlock_timeouts) and a margin');
	note(sprintf('gone after %.1f s', time - $t0));
	$y->query_safe('COMMIT');
	$y->quit;
	$n1->start;
	global($n1);
}

#---- Redis restarted while a cycle waits ----
{
	my $x = RlockTest::session($n1);
	my $y = RlockTest::session($n2);

	# with its data (saved just before): the locks, and the graph with its
	# entries' times, come back; the search goes on: one victim
	cross($x, $y, 'r:1', 'r:2', $n1);
	RlockTest::waiting_in_sql($n2, 'r:1');
	$redis->cmd('SAVE');
	$redis->restart;
	my @v = victims($x, $y);
	is(scalar @v, 1, 'Redis restarted with its data while a cycle waits: one victim');
	my $other = @v && $v[0] == $x ? $y : $x;
	RlockTest::collect($_) for @v;
	my ($out, $err) = RlockTest::collect($other);
	unlike($err, qr/ERROR/, 'the other session commits');

	# without its data: no lock is held any more, so no cycle: both waits
	# are granted, no victim, and both commits find their first lock lost
	cross($x, $y, 'r:3', 'r:4', $n1);
	RlockTest::waiting_in_sql($n2, 'r:3');
	$redis->restart(empty => 1);
	my ($ox, $ex) = RlockTest::collect($x);
	my ($oy, $ey) = RlockTest::collect($y);
	unlike("$ex$ey", qr/40P01/, 'Redis restarted empty: no victim');
	like($ex, qr/40001: lock "r:3" was lost/, 'a commit finds its lock lost');
	like($ey, qr/40001: lock "r:4" was lost/, 'so does the other');
	$_->quit for ($x, $y);
}

$n1->stop;
$n2->stop;
$redis->stop;
done_testing();
