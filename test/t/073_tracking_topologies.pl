# The check before commit without a round trip (client-side tracking,
# tests 068, 069 and 072) where the Redis rlock talks to changes under
# it:
#
# - Redis Sentinel with rlock.sync_replicas = off (so that tracking is
#   used): a hold is vouched without a verify; then, while transactions
#   hold tracked locks, a failover, once by SENTINEL FAILOVER (the old
#   primary stays up a while) and once by killing the primary.  On the new
#   primary a lock that is there commits, but only after a verify (what
#   the old connection tracked says nothing of the new one); a lock that
#   is not there fails the commit with 40001; tracking is armed again on
#   the new primary, and a fresh hold is vouched again;
# - the same deployment with rlock.sync_replicas = auto and a replica:
#   tracking stays armed, yet a lock the replica confirmed is asked about
#   at commit;
# - Redis Cluster (three primaries): no connection has tracking on, every
#   commit sends a verify; a held lock whose slot is migrated to another
#   primary before COMMIT (fully, or half: the slot still MIGRATING)
#   commits when the key moved intact and fails with 40001 when it was
#   deleted on its new owner.
#
# The verify round trips are counted as 068 counts them: the verify
# script's EVALSHA in the MONITOR stream of the server (of every primary
# in the cluster), read up to an ECHO sent after the commit.

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Sentinel;
use RlockTest::Tracking qw(armed);
use RlockTest::TLS;

plan skip_all => 'tracking across failovers does not depend on TLS (068 runs over TLS): the plain round runs this'
  if RlockTest::TLS::everywhere();

my $tls = RlockTest::TLS::everywhere();

my $verify_sha = sha1_hex(RlockTest::script_text(
		($ENV{TESTDIR} // '.') . '/src/kinds/plain/verify.lua'));

# Verify scripts the servers of @$watch (pairs of a Redis and its MONITOR
# connection) ran since the last call: each stream is read up to an ECHO
# sent after them.
my $echoes = 0;
sub verifies_since
{
	my ($watch) = @_;
	my $n = 0;
	for my $w (@$watch)
	{
		my ($redis, $mon) = @$w;
		my $mark = 'echo-' . ++$echoes;
		$redis->cmd('ECHO', $mark);
		while (1)
		{
			my $line = $mon->read_reply(10);
			die 'MONITOR stream ended' unless defined $line;
			last if $line =~ /"ECHO" "\Q$mark\E"/;
			$n++ if $line =~ /"EVALSHA" "$verify_sha"/;
		}
	}
	return $n;
}

# Does one of three runs of a transaction taking a fresh lock (named by
# $prefix and the try) commit without a verify?  Redis writes a grant's
# reply and its mark on two sockets: on a loaded machine a commit can come
# before the worker read the mark, and that one asks (as in 068).
sub vouched_once
{
	my ($s, $watch, $prefix) = @_;
	for my $try (1 .. 3)
	{
		verifies_since($watch);
		$s->query_safe('BEGIN');
		$s->query_safe("SELECT rlock_try('$prefix:$try')");
		$s->query_safe('COMMIT');
		return 1 if verifies_since($watch) == 0;
	}
	return 0;
}

# A commit of $s (with VERBOSITY verbose) that must fail with 40001
# because $key was lost, 100 ms after the change, as
# RlockTest::Tracking::commit_fails waits
sub commit_fails
{
	my ($s, $key, $what) = @_;
	$s->query_safe('SELECT pg_sleep(0.1)');
	$s->query('COMMIT');
	my $ok = like($s->{stderr}, qr/ERROR:  40001: lock "\Q$key\E" was lost/, $what);
	$s->{stderr} = '';
	return $ok;
}

sub status
{
	my ($node, $cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM rlock_status()");
}

sub port_of { my ($addr) = @_; return $addr =~ /:(\d+)$/ ? $1 : '' }

#==== Sentinel ====

mkdir "$PostgreSQL::Test::Utils::tmp_check/redis";
my $dep = RlockTest::Sentinel->start(
	dir => "$PostgreSQL::Test::Utils::tmp_check/redis",
	replicas => 1,
	sentinels => 3,
	down_after_ms => 1000,
	failover_timeout_ms => 4000);
# a window long enough that psql's round trips between the lock and the
# COMMIT leave the worker fresh (the default is 1 ms); a watchdog period
# longer than the test (its renewals untrack what they renew)
my $node = RlockTest::node('topo_sentinel', $dep->data_nodes->[0],
	connect_timeout => '1s',
	command_timeout => '1s',
	conf => [
		"rlock.topology = 'sentinel'",
		"rlock.nodes = '" . $dep->nodes_setting . "'",
		"rlock.sentinel_master = '" . $dep->master_name . "'",
		"rlock.sync_replicas = off",
		"rlock.verify_window = '1s'",
		"rlock.watchdog_timeout = '10min'",
		($tls ? "rlock.sentinel_tls = 'verify-full'" : ()) ]);
ok(RlockTest::wait_for_redis($node, 20), 'rlock reaches the primary through the Sentinels');

my $primary = $dep->primary;
ok(armed($primary), 'tracking is on, on the primary');

my $ctl = $node->background_psql('postgres', on_error_stop => 0);
my $kept = $node->background_psql('postgres', on_error_stop => 0);
my $later = $node->background_psql('postgres', on_error_stop => 0);
my $gone = $node->background_psql('postgres', on_error_stop => 0);
# the SQLSTATE in the messages
$_->query_safe('\set VERBOSITY verbose') for ($ctl, $kept, $later, $gone);

# One round: locks held and tracked while the Sentinels switch primaries
# by $switch (which returns the new primary); the commits afterwards.
sub failover_round
{
	my ($how, $switch) = @_;
	my $old = $dep->primary;
	my $watch = [ [ $old, $old->monitor ] ];
	ok(vouched_once($ctl, $watch, "ts:$how:before"),
		"$how: before, a fresh hold commits without a verify");

	# three holds taken the same way, under tracking
	for ([ $kept, 'kept' ], [ $later, 'later' ], [ $gone, 'gone' ])
	{
		my ($session, $name) = @$_;
		$session->query_safe('BEGIN');
		$session->query_safe("SELECT rlock_try('ts:$how:$name')");
	}
	my ($replica) = grep { $_ != $old } @{ $dep->data_nodes };
	ok( RlockTest::wait_until(
			sub {
				!grep { $replica->cmd('EXISTS', "ts:$how:$_") != 1 }
				  qw(kept later gone);
			},
			10),
		"$how: the locks reached the replica");

	my $new = $switch->();
	isnt($new->port, $old->port, "$how: the Sentinels promoted the replica");
	ok( RlockTest::wait_until(
			sub {
				port_of(status($node, 'redis_address')) eq $new->rlock_port
				  && status($node, 'command_connection') eq 'ready';
			},
			20),
		"$how: rlock follows to the new primary");
	is($new->cmd('EXISTS', "ts:$how:kept", "ts:$how:later", "ts:$how:gone"), 3,
		"$how: the locks are on the new primary");

	# at once
	$watch = [ [ $new, $new->monitor ] ];
	verifies_since($watch);
	$kept->query('COMMIT');
	is($kept->{stderr}, '', "$how: a lock present on the new primary commits");
	$kept->{stderr} = '';
	cmp_ok(verifies_since($watch), '>=', 1,
		"$how: after a verify on the new primary (the old tracking is not trusted)");

	# once tracking is armed on the new primary, and vouches for a fresh
	# hold there (so the worker is fresh: a mark came back), only what the
	# old connection tracked could vouch for the other two holds
	ok(armed($new), "$how: tracking is armed again, on the new primary");
	ok(vouched_once($ctl, $watch, "ts:$how:after"),
		"$how: a fresh hold there commits without a verify again");
	verifies_since($watch);
	$later->query('COMMIT');
	is($later->{stderr}, '', "$how: one committed once tracking is back commits");
	$later->{stderr} = '';
	is(verifies_since($watch), 1, "$how: after a verify too");

	$new->cmd('DEL', "ts:$how:gone");
	verifies_since($watch);
	commit_fails($gone, "ts:$how:gone",
		"$how: a lock missing on the new primary fails the commit with 40001");
	is(verifies_since($watch), 1, "$how: a verify found it missing");
	return $new;
}


my $old = $dep->primary;
my $new = failover_round('SENTINEL FAILOVER', sub { $dep->failover(timeout => 30) });

#---- rlock.sync_replicas = auto with a replica ----

# the old primary becomes the new one's replica
ok($dep->wait_converted($old, 30) && $dep->wait_synced($old, 30),
	'the old primary is a replica of the new one, in sync');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET rlock.sync_replicas = auto; SELECT pg_reload_conf()");
# ready, and knowing the replica (ROLE): an acquisition then waits for it
ok( RlockTest::wait_until(
		sub {
			status($node, 'sync_connection') eq 'ready'
			  && status($node, 'sync_wait') eq '1 replica';
		},
		15),
	'sync_replicas auto: the sync connection is used, for one replica');
ok(armed($new), 'tracking is on all the same');
my $watch = [ [ $new, $new->monitor ] ];
verifies_since($watch);
for my $i (1 .. 3)
{
	$ctl->query_safe('BEGIN');
	$ctl->query_safe("SELECT rlock_try('ts:synced:$i')");
	$ctl->query_safe('COMMIT');
}
is(verifies_since($watch), 3,
	'each lock the replica confirmed is asked about at commit: three commits, three verifies');
$ctl->query_safe('BEGIN');
$ctl->query_safe("SELECT rlock_try('ts:synced:gone')");
$new->cmd('DEL', 'ts:synced:gone');
commit_fails($ctl, 'ts:synced:gone', 'one deleted fails the commit');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET rlock.sync_replicas = off; SELECT pg_reload_conf()");
ok(RlockTest::wait_until(sub { status($node, 'sync_connection') eq 'unused' }, 15),
	'sync_replicas off again');

#---- the primary killed ----

failover_round('primary killed', sub { $dep->kill_primary(timeout => 30) });
is(join('', map { $_->{stderr} } $ctl, $kept, $later, $gone), '',
	'nothing else went wrong');

$ctl->quit;
$kept->quit;
$later->quit;
$gone->quit;
$node->stop;
$dep->stop;

#==== Cluster ====

# no replicas: rlock.sync_replicas (off besides) cannot be what keeps
# tracking out
my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 0);
my @primaries = $cluster->primaries;
my $cnode = RlockTest::node('topo_cluster', $primaries[0],
	connect_timeout => '1s',
	command_timeout => '1s',
	conf => [
		"rlock.topology = 'cluster'",
		"rlock.nodes = '127.0.0.1:" . $primaries[0]->rlock_port . "'",
		"rlock.sync_replicas = off",
		"rlock.verify_window = '1s'",
		"rlock.watchdog_timeout = '10min'" ]);
ok(RlockTest::wait_for_cluster_map($cnode, 3), 'rlock knows the three primaries');

# rlock's connections on every primary, and those with tracking on
sub rlock_clients
{
	my ($flag) = @_;
	my $n = 0;
	for my $p (@primaries)
	{
		$n += grep { / name=rlock_\S+ / && (!$flag || / flags=\S*t/) }
		  split /\n/, $p->cmd('CLIENT', 'LIST');
	}
	return $n;
}
my $s = $cnode->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');
# keys on every primary: a connection to each
$s->query_safe("SELECT rlock_is_locked('tc:warm:$_')") for 1 .. 20;
ok(RlockTest::wait_until(sub { rlock_clients(0) >= 3 }, 10),
	'rlock has connections to the primaries');
is(rlock_clients(1), 0, 'none of them has tracking on');

$watch = [ map { [ $_, $_->monitor ] } @primaries ];
verifies_since($watch);
for my $i (1 .. 3)
{
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT rlock_try('tc:plain:$i')");
	$s->query_safe('COMMIT');
}
is(verifies_since($watch), 3, 'three commits of untouched locks: three verifies');
is($s->{stderr}, '', 'and all committed');

# A command on the second primary; while the slot is only importing
# there ('half'), after ASKING on the same connection
sub on_second
{
	my ($how, @cmd) = @_;
	$primaries[1]->cmd('ASKING') if $how eq 'half';
	return $primaries[1]->cmd(@cmd);
}

# A lock on a key of the first primary, held while its slot moves to the
# second; $how: 'moved' (migrated fully), 'deleted' (then deleted on its
# new owner), 'half' (keys moved, the slot still MIGRATING: ASK)
for my $how ('moved', 'deleted', 'half')
{
	my $key;
	for my $i (0 .. 1000)
	{
		$key = "tc:$how:$i";
		last if $cluster->owner($cluster->slot($key)) == $primaries[0];
	}
	my $slot = $cluster->slot($key);
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT rlock_try('$key')");
	is($primaries[0]->cmd('EXISTS', $key), 1, "$how: $key is held on the first primary");
	$cluster->migrate_begin($slot, $primaries[1]);
	$cluster->migrate_keys($slot);
	$cluster->migrate_end($slot) unless $how eq 'half';
	is(on_second($how, 'EXISTS', $key), 1, "$how: the key moved to the second");
	verifies_since($watch);
	if ($how eq 'deleted')
	{
		on_second($how, 'DEL', $key);
		commit_fails($s, $key, 'a lock deleted on its new owner fails the commit with 40001');
	}
	else
	{
		$s->query('COMMIT');
		is($s->{stderr}, '', "$how: the lock that moved intact commits");
		$s->{stderr} = '';
		ok( RlockTest::wait_until(
				sub { on_second($how, 'EXISTS', $key) == 0 }, 10),
			"$how: and is released on its new owner");
	}
	cmp_ok(verifies_since($watch), '>=', 1, "$how: the commit sent a verify");
	$cluster->migrate_end($slot) if $how eq 'half';
}
is(rlock_clients(1), 0, 'no connection of rlock has tracking on at the end');

$s->quit;
$cnode->stop;
$cluster->stop;

done_testing();
