# CLUSTER SHARDS that lists two primaries up in one shard, as Redis 8
# does when a replica that took over keeps its old shard's id: the worker
# cannot tell from it which primary serves which slots, reads the map once
# from CLUSTER SLOTS instead, and uses it; the next refresh asks CLUSTER
# SHARDS again.
#
# A Redis Cluster of one real node behind a relay on two ports
# (RlockTest::Hostile): as the relay tells it, both ports are primaries of
# one shard (CLUSTER SHARDS), or each serves half of the slots (CLUSTER
# SLOTS).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Hostile;

plan skip_all => 'the relay reads the plain protocol: the plain round runs this'
  if RlockTest::TLS::everywhere();

my ($redis, $hostile) = RlockTest::Hostile->cluster_of_one(ports => 2);
my @ports = $hostile->ports;

sub node_of
{
	my ($i) = @_;
	return [ 'id', sprintf('%040x', $i + 1), 'port', \$ports[$i], 'ip', '127.0.0.1',
		'endpoint', '127.0.0.1', 'role', 'master', 'replication-offset', \0,
		'health', 'online' ];
}

# The first three map reads: one shard, every slot, both ports its
# primaries, both up (a refresh every 5 s: the two-primary map stays at
# least 10 s); then one shard with the first port alone.  Rules apply in
# the order they are given.
$hostile->replace('rlock_cluster', qr/^CLUSTER SHARDS/,
	RlockTest::Resp::encode(
		[ [ 'slots', [ \0, \16383 ], 'nodes', [ node_of(0), node_of(1) ] ] ]),
	count => 3);
$hostile->replace('rlock_cluster', qr/^CLUSTER SHARDS/,
	RlockTest::Resp::encode([ [ 'slots', [ \0, \16383 ], 'nodes', [ node_of(0) ] ] ]));
# CLUSTER SLOTS: the slots halved between the two ports
$hostile->replace('rlock_cluster', qr/^CLUSTER SLOTS/,
	RlockTest::Resp::encode(
		[ map { [ \($_ * 8192), \($_ * 8192 + 8191),
				[ '127.0.0.1', \$ports[$_], sprintf('%040x', $_ + 1) ] ] } 0, 1 ]));

# a key of each half
my @keys;
for (my $j = 0; !defined $keys[0] || !defined $keys[1]; $j++)
{
	$keys[ $redis->cmd('CLUSTER', 'KEYSLOT', "f:$j") < 8192 ? 0 : 1 ] //= "f:$j";
}

my $node = RlockTest::node('fallback', $redis,
	conf => [ "rlock.topology = 'cluster'", "rlock.nodes = '127.0.0.1:$ports[0]'" ]);

sub status
{
	my ($col) = @_;
	return $node->safe_psql('postgres', "SELECT $col FROM rlock_status()");
}

ok(RlockTest::wait_until(sub { status('cluster_primaries') == 2 }, 20),
	'the map read from CLUSTER SLOTS names both primaries');
is( $node->safe_psql('postgres',
		"BEGIN; SELECT rlock_try('$keys[0]') AND rlock_try('$keys[1]'); COMMIT"),
	't', 'a lock is taken in each half');
ok(RlockTest::wait_until(sub { $hostile->connections('rlock_command') >= 2 }, 10),
	'each primary has its own command connection');
unlike(status("coalesce(last_error, '')"), qr/two primaries/,
	'the ambiguous shard is not reported as an error');

# a later refresh asks CLUSTER SHARDS again, now unambiguous
ok(RlockTest::wait_until(sub { status('cluster_primaries') == 1 }, 40),
	'a later refresh reads CLUSTER SHARDS again: one primary');
is( $node->safe_psql('postgres',
		"BEGIN; SELECT rlock_try('$keys[0]') AND rlock_try('$keys[1]'); COMMIT"),
	't', 'and both halves are served by the one primary');

$node->stop;
$hostile->stop;
$redis->stop;
done_testing();
