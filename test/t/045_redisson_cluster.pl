# Redisson with useClusterServers and rlock with rlock.topology = cluster
# on one Redis Cluster of three primaries: for every Redisson version of
# the interop suite, on a key of each primary, each side is refused the
# other's lock and wakes the other's waiter.  Both sides use sharded
# pub/sub (Redisson's AUTO on Redis 7, rlock's auto); then Redisson with
# shardedSubscriptionMode OFF against rlock.cluster_pubsub = classic, and
# the same Redisson against rlock.cluster_pubsub = both.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Redisson;

plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1);
my @primaries = $cluster->primaries;
my $node = RlockTest::node('rc', $primaries[0],
	conf => [
		"rlock.topology = 'cluster'",
		"rlock.nodes = '" . join(',', map { '127.0.0.1:' . $_->port } @primaries) . "'" ]);
ok(RlockTest::wait_for_cluster_map($node, 3), 'rlock learnt the map');

sub sql { return $node->safe_psql('postgres', $_[0]) }

# A key of each primary, with $prefix
sub keys_of_each
{
	my ($prefix) = @_;
	my %k;
	for my $i (0 .. 300)
	{
		my $key = "$prefix:$i";
		my $port = $cluster->owner($cluster->slot($key))->port;
		$k{$port} //= $key;
	}
	return map { $k{ $_->port } } @primaries;
}

# Subscribers of $key's channel on its primary, in the namespace $mode
sub subscribers
{
	my ($key, $mode) = @_;
	my $owner = $cluster->owner($cluster->slot($key));
	my $r = $owner->cmd('PUBSUB', $mode eq 'classic' ? 'NUMSUB' : 'SHARDNUMSUB',
		"redisson_lock__channel:{$key}");
	return ref $r eq 'ARRAY' ? $r->[1] : 0;
}


sub both_ways
{
	my ($java, $v, $key, $mode) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);

	# Redisson holds: SQL is refused, then waits and is woken by unlock()
	is($java->call('a.1', 'trylock', $key, 0), 'true', "$v: Redisson takes $key");
	is(sql("BEGIN; SELECT rlock_try('$key'); COMMIT"), 'f', "$v: rlock_try is refused");
	RlockTest::send_query($s, "BEGIN; SELECT rlock_try('$key', '30s');");
	ok(RlockTest::waiting_in_sql($node, $key), "$v: a transaction waits");
	ok(RlockTest::wait_until(sub { subscribers($key, $mode) >= 1 }, 10),
		"$v: rlock subscribed ($mode) on the channel's primary");
	$java->call('a.1', 'unlock', $key);
	my ($out, $err) = RlockTest::collect($s);
	is($out, 't', "$v: unlock() wakes the transaction, which gets it") or diag($err);

	# SQL holds: Redisson is refused, then waits and is woken by COMMIT
	is($java->call('b.1', 'trylock', $key, 0), 'false',
		"$v: tryLock is refused while the transaction holds it");
	my $id = $java->send('b.1', 'trylock', $key, 30000);
	ok(RlockTest::wait_until(sub { subscribers($key, $mode) >= 1 }, 10),
		"$v: Redisson's tryLock waits, subscribed ($mode)");
	$s->query_safe('COMMIT');
	my $r = $java->result($id, 20);
	ok($r && $r->{ok} && $r->{value} eq 'true', "$v: the commit wakes tryLock, which gets it")
	  or diag(explain($r));
	$java->call('b.1', 'unlock', $key);
	$s->quit;
}

for my $version (@RlockTest::Redisson::VERSIONS)
{
	my $java = RlockTest::Redisson->start_cluster($cluster, version => $version);
	is($java->version, $version, "Redisson $version runs with useClusterServers");
	my @k = keys_of_each("rc:$version");
	both_ways($java, "[$version] primary $_", $k[$_], 'sharded') for 0 .. 2;
	$java->stop;
}

# classic pub/sub on both sides: Redisson 3.29+ with shardedSubscriptionMode OFF
my $java = RlockTest::Redisson->start_cluster($cluster, sharded => 'off');
for my $mode ('classic', 'both')
{
	sql("ALTER SYSTEM SET rlock.cluster_pubsub = '$mode'; SELECT pg_reload_conf()");
	ok(RlockTest::wait_until(sub { sql('SELECT cluster_pubsub FROM rlock_status()') eq $mode }, 10),
		"rlock.cluster_pubsub = $mode applied");
	my @k = keys_of_each("rc:$mode");
	both_ways($java, "[OFF, rlock $mode] primary $_", $k[$_], 'classic') for 0 .. 2;
}
$java->stop;

# and rlock's "both" with Redisson's sharded AUTO
$java = RlockTest::Redisson->start_cluster($cluster);
my @k = keys_of_each('rc:both-auto');
both_ways($java, "[AUTO, rlock both] primary 0", $k[0], 'sharded');
$java->stop;

unlike(slurp_file($node->logfile), qr/TRAP|terminated by signal/, 'no crash in the log');
$node->stop;
$cluster->stop;
done_testing();
