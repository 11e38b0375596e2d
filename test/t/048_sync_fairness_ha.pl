# Local waiters served in their turn while acquisitions wait for
# replicas (rlock.sync_replicas = auto, the default), behind Redis
# Sentinel and in a Redis Cluster: eight sessions looping over one hot
# key each commit a fair share, and none waits for long.  Test 047 does
# the same on a standalone primary, and the hand-off step by step.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Sentinel;

plan skip_all => 'the line does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

# The load on $node, which must wait for replicas; checks and notes.
sub fair_under_sync
{
	my ($node, $what) = @_;
	# a Redis Cluster primary's connections are made when a key of it is
	# used: take the hot key once (the first may not wait for a replica)
	ok(RlockTest::wait_until(
			sub {
				$node->safe_psql('postgres',
					"SELECT rlock_session_try('fair:hot'), rlock_release_all()");
				$node->safe_psql('postgres',
					'SELECT command_connection, sync_connection FROM rlock_status()')
				  eq 'ready|ready';
			},
			20),
		"$what: acquisitions wait for a replica");
	my $r = RlockTest::hot_key_load($node, 'fair:hot', seconds => 6);
	note sprintf('%s: %d transactions, fewest per client %d, longest %.0f ms',
		$what, $r->{total}, $r->{min_count}, $r->{max_ms});
	is($node->safe_psql('postgres', 'SELECT n FROM hot_row'), $r->{total},
		"$what: every committed transaction held the lock");
	cmp_ok($r->{total}, '>=', 80, "$what: the hot key was handed around");
	cmp_ok($r->{min_count}, '>=', $r->{total} / 8 / 4,
		"$what: every session committed at least a quarter of its fair share");
	cmp_ok($r->{max_ms}, '<', 2000,
		"$what: no transaction waited two seconds for the lock");
}

my $dep = RlockTest::Sentinel->start(replicas => 1, sentinels => 3);
my $sentinel = RlockTest::node('fair_sentinel', $dep->data_nodes->[0],
	conf => [
		'log_min_messages = warning', 'log_statement = none',
		"rlock.topology = 'sentinel'",
		"rlock.nodes = '" . $dep->nodes_setting . "'",
		"rlock.sentinel_master = '" . $dep->master_name . "'" ]);
fair_under_sync($sentinel, 'Sentinel');
$sentinel->stop;
$dep->stop;

my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1);
my @primaries = $cluster->primaries;
my $clustered = RlockTest::node('fair_cluster', $primaries[0],
	conf => [
		'log_min_messages = warning', 'log_statement = none',
		"rlock.topology = 'cluster'",
		"rlock.nodes = '127.0.0.1:" . $primaries[0]->rlock_port . "'" ]);
ok(RlockTest::wait_for_cluster_map($clustered, 3), 'the cluster map is known');
fair_under_sync($clustered, 'Cluster');
$clustered->stop;
$cluster->stop;
done_testing();
