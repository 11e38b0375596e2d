# A Redis Cluster primary's connections are made when used and closed
# when idle; one lost in an outage with a release still to send is made
# again when the primary is back, however long the outage lasted, and the
# release goes: the lock is not left to its lease.
#
# The same across a failover: the primary killed with the release
# waiting for it, the replica promoted; nothing else goes to the promoted
# replica, and the release must all the same.
#
# A session holds a lock with a ten-minute lease on a key of a primary;
# the primary is frozen, its connection lost, and the session ends, so
# its release waits for a connection; after more than a minute (longer
# than a primary's connections stay without use) the primary comes back,
# and the lock must be gone within seconds.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Cluster;

plan skip_all => 'the connections of a cluster do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

# no node is taken for failed while one is frozen
my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 0,
	node_timeout_ms => 600000);
my @primaries = $cluster->primaries;
my $node = RlockTest::node('outage', $primaries[0],
	command_timeout => '1s',
	connect_timeout => '1s',
	conf => [
		"rlock.topology = 'cluster'",
		"rlock.nodes = '127.0.0.1:" . $primaries[0]->rlock_port . "'" ]);
ok(RlockTest::wait_until(
		sub { $node->safe_psql('postgres', 'SELECT cluster_primaries FROM rlock_status()') eq '3' }, 20),
	'the map of three primaries');

# a primary other than the seed, and other than the one of the
# instance's registry entry (written every few seconds), with a key
my $uuid = $node->safe_psql('postgres', 'SELECT instance_owner FROM rlock_status()');
my $registry = $cluster->owner($cluster->slot("rlock_instance:{$uuid}"));
my ($victim) = grep { $_->port != $primaries[0]->port && $_->port != $registry->port } @primaries;
ok(defined $victim, 'a primary that neither the seed nor the registry uses');
my $key;
for (my $i = 0; !defined $key; $i++)
{
	$key = "outage:$i" if $cluster->owner($cluster->slot("outage:$i"))->port == $victim->port;
}

my $s = $node->background_psql('postgres', on_error_stop => 0);
is($s->query_safe("SELECT rlock_session_try('$key', '0', '10 min')"), 't',
	'a lock with a ten-minute lease on a key of that primary');
# frozen, the primary's command connection is lost (a question that is
# not answered); the session then ends: its release waits for a
# connection to that primary
$victim->freeze;
my ($rc, $out, $err) = RlockTest::timed_psql($node, "SELECT rlock_is_locked('$key')");
like($err, qr/ERROR:  58030:/, 'the frozen primary does not answer');
my $frozen_at = time;
$s->quit;
# longer than a primary's idle connections are kept (60 s)
sleep 1 while time - $frozen_at < 70;
$victim->thaw;
ok(RlockTest::wait_until(sub { $victim->cmd('EXISTS', $key) == 0 }, 20),
	'the primary back, the release reaches it: the lock is gone, not kept for its lease');

$node->stop;
$cluster->stop;

# The same across a failover: the primary is killed with the session's
# release waiting for it, and its replica promoted.  Nothing else is sent
# to the promoted replica, whose connection is made when used: the
# release must go there all the same.
$cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1);
@primaries = $cluster->primaries;
$node = RlockTest::node('failover', $primaries[0],
	command_timeout => '1s',
	connect_timeout => '1s',
	conf => [
		"rlock.topology = 'cluster'",
		"rlock.nodes = '127.0.0.1:" . $primaries[0]->rlock_port . "'" ]);
ok(RlockTest::wait_until(
		sub { $node->safe_psql('postgres', 'SELECT cluster_primaries FROM rlock_status()') eq '3' }, 20),
	'failover: the map of three primaries');
$uuid = $node->safe_psql('postgres', 'SELECT instance_owner FROM rlock_status()');
$registry = $cluster->owner($cluster->slot("rlock_instance:{$uuid}"));
($victim) = grep { $_->port != $primaries[0]->port && $_->port != $registry->port } @primaries;
undef $key;
for (my $i = 0; !defined $key; $i++)
{
	$key = "failover:$i" if $cluster->owner($cluster->slot("failover:$i"))->port == $victim->port;
}
$s = $node->background_psql('postgres', on_error_stop => 0);
is($s->query_safe("SELECT rlock_session_try('$key', '0', '10 min')"), 't',
	'failover: a lock with a ten-minute lease, confirmed by the replica');
my $replica = $cluster->replica_of($victim);
$replica->cmd('READONLY');
ok(RlockTest::wait_until(sub { $replica->cmd('EXISTS', $key) eq '1' }, 10),
	'failover: the replica has it');
$victim->kill9;
$s->quit;
$cluster->_wait_promoted($replica);
my $promoted = $replica;
ok(RlockTest::wait_until(sub { $promoted->cmd('EXISTS', $key) eq '0' }, 20),
	'failover: the release reaches the promoted replica: the lock is gone, not kept for its lease')
  or diag('EXISTS: ' . explain($promoted->cmd('EXISTS', $key)));

$node->stop;
$cluster->stop;
done_testing();
