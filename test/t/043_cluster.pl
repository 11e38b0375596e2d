# Redis Cluster (rlock.topology = cluster): three primaries with a
# replica each, made with redis-cli --cluster create on loopback ports.
#
# - the slot map learnt from a seed, what rlock_status() shows;
# - locks on keys of every primary, in both scopes, each written on the
#   primary of its slot; fencing tokens counted there too;
# - names whose channel lands in another slot refused, only in a cluster;
# - a waiter woken by the holder's release, with sharded pub/sub
#   (SSUBSCRIBE on the channel's primary) and with classic pub/sub, also
#   when the lock's slot moved to another primary meanwhile (Redis drops
#   the shard channel: subscribed again on the new owner);
# - scripts flushed on a primary: loaded there again (NOSCRIPT);
# - the watchdog renewing locks of every primary, one script call per
#   primary;
# - a slot migrated step by step while pgbench on two instances guards a
#   key of it: ASK and MOVED followed, no two critical sections overlap;
# - a primary frozen with the rest up: its keys fail with 58030 within the
#   usual bound, the keys of the others keep working.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Cluster;

# A long node timeout: a primary frozen for a few seconds is not failed
# over, so that the test sees it unreachable with the rest up
my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1,
	node_timeout_ms => 20000);
my @primaries = $cluster->primaries;
# in the TLS round the cluster and rlock speak TLS (RlockTest::Cluster)
my $seeds = join(',', map { '127.0.0.1:' . $_->rlock_port } @primaries[ 0, 1 ]);

sub cluster_node
{
	my ($name, @conf) = @_;
	return RlockTest::node($name, $primaries[0],
		connect_timeout => '1s',
		command_timeout => '1s',
		conf => [
			"rlock.topology = 'cluster'",
			"rlock.nodes = '$seeds'",
			"rlock.watchdog_timeout = '3s'",
			@conf ]);
}

sub status
{
	my ($node, $cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM rlock_status()");
}

sub stat_of
{
	my ($node, $col) = @_;
	return $node->safe_psql('postgres', "SELECT $col FROM rlock_stats");
}

# Keys of each primary: $n per primary, by the slot Redis computes
my %by_port;
for my $i (0 .. 400)
{
	my $key = "ck:$i";
	my $owner = $cluster->owner($cluster->slot($key));
	push @{ $by_port{ $owner->port } }, $key
	  if @{ $by_port{ $owner->port } // [] } < 5;
}
is(scalar(grep { @{ $by_port{ $_->port } // [] } == 5 } @primaries), 3,
	'five keys of each primary');
my %port_of_key;
for my $port (keys %by_port)
{
	$port_of_key{$_} = $port for @{ $by_port{$port} };
}
my %node_of_port = map { $_->port => $_ } $cluster->nodes;

#---- the map ----

my $na = cluster_node('a');
ok(RlockTest::wait_for_cluster_map($na, 3),
	'the map names three primaries, and every connection is ready');
is(status($na, 'topology, redis_address'), 'cluster|Redis Cluster (3 primaries)',
	'rlock_status shows the topology');
like(status($na, 'cluster_node'), qr/^127\.0\.0\.1:\d+$/,
	'rlock_status shows the node asked for the map');
is(status($na, 'cluster_pubsub'), 'sharded',
	'auto takes sharded pub/sub, as Redisson does with Redis 7');

#---- locks on every primary, both scopes ----

my @all = sort keys %port_of_key;
my $list = join(',', map { "'$_'" } @all);
my $out = $na->safe_psql('postgres', qq{
	BEGIN;
	SELECT bool_and(rlock_try(k)) FROM unnest(ARRAY[$list]) k;
	SELECT string_agg(k, ',' ORDER BY k) FROM unnest(ARRAY[$list]) k
	WHERE rlock_is_locked(k);
	COMMIT;
});
is($out, "t\n" . join(',', @all), 'a transaction takes locks on keys of all three primaries');

# held where the slot says, in Redisson's layout, and gone after commit
my $nb = $na->background_psql('postgres');
$nb->query_safe("BEGIN; SELECT rlock_try(k) FROM unnest(ARRAY[$list]) k");
my $misplaced = 0;
for my $key (@all)
{
	my $owner = $node_of_port{ $port_of_key{$key} };
	my $owners = $owner->owners($key);
	$misplaced++ unless @$owners == 1 && $owners->[0] =~ /^[0-9a-f-]{36}:\d+$/;
	for my $other (grep { $_->port != $port_of_key{$key} } @primaries)
	{
		my $exists = $other->cmd('EXISTS', $key);
		$misplaced++ unless ref $exists eq 'HASH';	# MOVED: not there
	}
}
is($misplaced, 0, 'each lock is a hash on the primary of its slot, with one owner');
$nb->query_safe('COMMIT');
ok( RlockTest::wait_until(
		sub {
			!grep { $node_of_port{ $port_of_key{$_} }->cmd('EXISTS', $_) } @all;
		},
		10),
	'the commit released all of them, on every primary');

$out = $na->safe_psql('postgres', qq{
	SELECT bool_and(rlock_session_try(k)) FROM unnest(ARRAY[$list]) k;
	SELECT count(*) FROM unnest(ARRAY[$list]) k WHERE rlock_is_locked(k);
	SELECT bool_and(rlock_session_release(k)) FROM unnest(ARRAY[$list]) k;
	SELECT count(*) FROM unnest(ARRAY[$list]) k WHERE rlock_is_locked(k);
});
is($out, "t\n15\nt\n0", 'session locks on every primary, taken and released');

#---- fencing tokens ----

my ($k0, $k1) = ($by_port{ $primaries[0]->port }[0], $by_port{ $primaries[1]->port }[0]);
$out = $na->safe_psql('postgres', qq{
	SELECT rlock_try_token('$k0') < rlock_try_token('$k0'),
	       rlock_try_token('$k1') IS NOT NULL;
});
is($out, 't|t', 'fencing tokens grow, on keys of two primaries');
is($primaries[0]->cmd('EXISTS', "redisson_lock_token:{$k0}"), 1,
	"the token counter sits on the key's primary");

#---- names that leave the key's slot ----

for my $bad ('a}b', 'a{b', 'a{}b')
{
	my ($ret, $stdout, $stderr) = $na->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT rlock_try('$bad')");
	like($stderr, qr/22023: lock key "\Q$bad\E" cannot be used in a Redis Cluster/,
		"'$bad' is refused in a cluster with 22023");
}
is($na->safe_psql('postgres', "SELECT rlock_try('{a}b')"), 't',
	'a name with a complete hash tag is taken');

#---- waiting and wake-up, sharded and classic ----

sub wake_test
{
	my ($mode, $key) = @_;
	my $owner = $node_of_port{ $port_of_key{$key} };
	my $holder = $na->background_psql('postgres');
	$holder->query_safe("BEGIN; SELECT rlock_try('$key', '0', '60s')");
	my $waiter = $na->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($waiter, "SELECT rlock_try('$key', '20s') AS got;");
	my $channel = "redisson_lock__channel:{$key}";
	my $sub = sub {
		my $r = $owner->cmd('PUBSUB', $mode eq 'sharded' ? 'SHARDNUMSUB' : 'NUMSUB',
			$channel);
		return ref $r eq 'ARRAY' ? $r->[1] : -1;
	};
	ok(RlockTest::wait_until(sub { $sub->() == 1 }, 10),
		"$mode: the waiter is subscribed on the primary of the channel's slot");
	$holder->query_safe('COMMIT');
	my ($got) = RlockTest::collect($waiter);
	is($got, 't', "$mode: the release wakes the waiter (the lease had 60 s left)");
	$waiter->quit;
	$holder->quit;
}

wake_test('sharded', $by_port{ $primaries[1]->port }[1]);

# As the documented Redis users (RlockTest::ACL), classic pub/sub needs
# what doc/configuration.md adds for it
if (RlockTest::ACL::everywhere())
{
	RlockTest::ACL::apply($_, (RlockTest::ACL::lines('cluster'))[2])
	  for $cluster->nodes;
}
$na->append_conf('postgresql.conf', "rlock.cluster_pubsub = 'classic'");
$na->reload;
ok(RlockTest::wait_until(sub { status($na, 'cluster_pubsub') eq 'classic' }, 10),
	'rlock.cluster_pubsub = classic is applied on reload');
wake_test('classic', $by_port{ $primaries[2]->port }[1]);
$na->append_conf('postgresql.conf', "rlock.cluster_pubsub = 'auto'");
$na->reload;

#---- a waiter across a slot migration, sharded and classic ----

# The holder takes $key with a long lease, a waiter waits on it, the
# slot moves to another primary, and the holder commits: the waiter must
# get the lock well before the lease would have ended.
sub waiter_across_migration
{
	my ($mode, $key) = @_;
	my $slot = $cluster->slot($key);
	my $from = $cluster->owner($slot);
	my ($to) = grep { $_->port != $from->port } @primaries;
	my $channel = "redisson_lock__channel:{$key}";
	my $subs = sub {
		my ($node) = @_;
		my $r = $node->cmd('PUBSUB', $mode eq 'sharded' ? 'SHARDNUMSUB' : 'NUMSUB',
			$channel);
		return ref $r eq 'ARRAY' ? $r->[1] : -1;
	};
	my $holder = $na->background_psql('postgres');
	$holder->query_safe("BEGIN; SELECT rlock_try('$key', '0', '60s')");
	my $waiter = $na->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($waiter, "SELECT rlock_try('$key', '30s') AS got;");
	ok(RlockTest::wait_until(sub { $subs->($from) == 1 }, 10),
		"$mode: the waiter is subscribed on the slot's primary");
	$cluster->migrate_slot($slot, $to);
	if ($mode eq 'sharded')
	{
		ok(RlockTest::wait_until(sub { $subs->($to) == 1 }, 15),
			'sharded: Redis dropped the shard channel, rlock subscribed it on the new primary');
	}
	is($to->cmd('EXISTS', $key), 1, "$mode: the held lock moved with its slot");
	$holder->query_safe('COMMIT');
	my ($got) = RlockTest::collect($waiter);
	is($got, 't', "$mode: the release on the new primary wakes the waiter (60 s of lease were left)");
	$waiter->quit;
	$holder->quit;
}

waiter_across_migration('sharded', $by_port{ $primaries[0]->port }[4]);
$na->safe_psql('postgres',
	"ALTER SYSTEM SET rlock.cluster_pubsub = 'classic'; SELECT pg_reload_conf()");
ok(RlockTest::wait_until(sub { status($na, 'cluster_pubsub') eq 'classic' }, 10),
	'classic again');
waiter_across_migration('classic', $by_port{ $primaries[1]->port }[4]);
$na->safe_psql('postgres',
	"ALTER SYSTEM RESET rlock.cluster_pubsub; SELECT pg_reload_conf()");
ok(RlockTest::wait_until(sub { status($na, 'cluster_pubsub') eq 'sharded' }, 10),
	'auto again');

#---- scripts lost on a primary ----

my $flushed = $primaries[2];
is($flushed->cmd('SCRIPT', 'FLUSH'), 'OK', 'the scripts flushed on one primary');
my $fk = $by_port{ $flushed->port }[0];
is($na->safe_psql('postgres', "BEGIN; SELECT rlock_try('$fk'); COMMIT"), 't',
	'a lock on that primary is taken: NOSCRIPT made rlock load them there again');

#---- the watchdog, one call per primary ----

my $renewer = $na->background_psql('postgres');
$renewer->query_safe("SELECT rlock_session_try(k) FROM unnest(ARRAY[$list]) k");
my $calls0 = stat_of($na, 'renewal_calls');
my $renewals0 = stat_of($na, 'renewals');
ok(RlockTest::wait_until(sub { stat_of($na, 'renewals') >= $renewals0 + 15 }, 10),
	'the watchdog renewed the 15 locks');
my $calls = stat_of($na, 'renewal_calls') - $calls0;
my $renewed = stat_of($na, 'renewals') - $renewals0;
# five locks a primary: one call renews them together, two when the
# locks' renewals fall due on two ticks (a loaded machine); one a lock
# would be a call a renewal
ok($calls * 2 <= $renewed, "renewals batched by primary: $calls calls for $renewed renewals");
$renewer->query_safe("SELECT rlock_session_release(k) FROM unnest(ARRAY[$list]) k");
$renewer->quit;

#---- the watchdog across a migration ----

# Two session locks of one primary renewed in one call; one's slot moves
# to another primary, and nothing else touches it: the node that lost it
# answers 2 for it in the batch, and the worker sends that one again on
# its own, where MOVED takes it.  Its 3 s lease must not run out.
my ($wk1, $wk2) = @{ $by_port{ $primaries[2]->port } }[ 3, 4 ];
my $wslot = $cluster->slot($wk1);
my $wholder = $na->background_psql('postgres');
$wholder->query_safe("SELECT rlock_session_try('$wk1'), rlock_session_try('$wk2')");
my $lost0 = stat_of($na, 'lost');
$cluster->migrate_slot($wslot, $primaries[0]);
my $renewals1 = stat_of($na, 'renewals');
ok(RlockTest::wait_until(sub { stat_of($na, 'renewals') >= $renewals1 + 8 }, 15),
	'four renewal periods after the move');
cmp_ok($primaries[0]->cmd('PTTL', $wk1), '>', 1000,
	"the moved lock's lease is renewed on its new primary");
is(stat_of($na, 'lost'), $lost0, 'no lock lost');
is($na->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE key IN ('$wk1', '$wk2') AND state = 'held'"),
	'2', 'both still held');
$wholder->query_safe("SELECT rlock_session_release('$wk1'), rlock_session_release('$wk2')");
$wholder->quit;

#---- a slot migrated under load from two instances ----

my $c = cluster_node('c');
ok(RlockTest::wait_for_cluster_map($c, 3), 'the second instance found the map');
my $hot = $by_port{ $primaries[0]->port }[2];
my $slot = $cluster->slot($hot);
my ($moved0, $ask0) = map { stat_of($na, $_) + stat_of($c, $_) } qw(cluster_moved cluster_ask);
my $failed0 = stat_of($na, 'failed') + stat_of($c, 'failed');
my $runs = RlockTest::guarded_load_start([ $na, $c ], $hot, seconds => 10, lease => '5s');
sleep 2;
my $begun = time;
$cluster->migrate_begin($slot, $primaries[2]);
sleep 2;
$cluster->migrate_keys($slot);
sleep 2;
my $ending = time;
$cluster->migrate_end($slot);
my $r = RlockTest::guarded_load_finish($runs);
# while the slot was MIGRATING, the lock lived on one node or the other:
# waiters must have been woken all along (a release on the importing
# node publishes there, and again on the owner, where they listen)
my $during = grep { $_->[1] > $begun + 0.5 && $_->[2] < $ending } @{ $r->{committed} };
cmp_ok($during, '>', 100,
	"sections kept committing while the slot was migrating ($during in "
	  . sprintf('%.1f', $ending - $begun - 0.5) . ' s)');
my ($moved, $ask) = map { stat_of($na, $_) + stat_of($c, $_) - ($_ eq 'cluster_moved' ? $moved0 : $ask0) }
  qw(cluster_moved cluster_ask);
cmp_ok(scalar(@{ $r->{committed} }), '>', 50,
	scalar(@{ $r->{committed} }) . ' critical sections committed through the migration');
is($r->{ran_overlaps}, 0, 'no two critical sections overlapped');
is($r->{aborted}, 0, 'no pgbench client aborted') or diag($r->{output});
cmp_ok($moved, '>', 0, "MOVED followed ($moved)");
cmp_ok($ask, '>', 0, "ASK followed ($ask)");
is(stat_of($na, 'failed') + stat_of($c, 'failed') - $failed0, 0,
	'no acquisition failed through the migration');
is(scalar(@{ $r->{ran} }), scalar(@{ $r->{committed} }) + $r->{failed},
	'every section that ran committed, or its transaction failed and counted');
is($primaries[2]->cmd('EXISTS', $hot), 0,
	'the lock is free on its new primary after the load');

my $warm_key = $by_port{ $primaries[2]->port }[1];

#---- TRYAGAIN: a token counter and its lock split by a migration ----

# The counter stays on the source when the lock is released; with the
# slot MIGRATING, a script declaring both finds one key there and not the
# other: TRYAGAIN until the keys have moved, then ASK.
my $tk = $by_port{ $primaries[2]->port }[2];
my $tslot = $cluster->slot($tk);
my $token0 = $na->safe_psql('postgres', "BEGIN; SELECT rlock_try_token('$tk'); COMMIT");
my $retries0 = stat_of($na, 'cluster_retries');
$cluster->migrate_begin($tslot, $primaries[0]);
my $tq = $na->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($tq, "BEGIN; SELECT rlock_try_token('$tk'); COMMIT;");
ok(RlockTest::wait_until(sub { stat_of($na, 'cluster_retries') > $retries0 }, 5),
	'TRYAGAIN while the counter is on the source and the lock is not');
my $r0 = stat_of($na, 'cluster_retries');
usleep(500_000);
my $r1 = stat_of($na, 'cluster_retries');
cmp_ok($r1 - $r0, '<', 100,
	'retried after a pause, not in a loop (' . ($r1 - $r0) . ' TRYAGAIN in 0.5 s)');
$cluster->migrate_keys($tslot);
$cluster->migrate_end($tslot);
my ($tout, $terr) = RlockTest::collect($tq);
cmp_ok($tout, '>', $token0, 'the token is granted on the new primary once the keys moved')
  or diag($terr);
$tq->quit;

#---- CLUSTERDOWN ----

# A primary that lost one of its slots sees the cluster down and refuses
# every key: its keys fail with 58030 within the usual bound, naming what
# Redis said, with a pause between tries; the other primaries' keys work.
my $down = $primaries[1];
my $dk = $by_port{ $down->port }[2];
my ($spare) = grep { $cluster->owner($cluster->slot($_))->port == $down->port }
  map { "spare:$_" } 0 .. 500;
my $spare_slot = $cluster->slot($spare);
is($down->cmd('CLUSTER', 'DELSLOTS', $spare_slot), 'OK', 'a primary drops one of its slots');
ok(RlockTest::wait_until(
		sub { ($down->cmd('CLUSTER', 'INFO') // '') =~ /^cluster_state:fail/m }, 10),
	'that primary sees the cluster down');
my $retries1 = stat_of($na, 'cluster_retries');
my ($drc, $dout, $derr, $dtook) = RlockTest::timed_psql($na, "SELECT rlock_try('$dk')");
like($derr, qr/58030: .*\n.*DETAIL: .*CLUSTERDOWN/,
	'a key of that primary fails with 58030, and the detail says CLUSTERDOWN');
# acquisitions wait for the replica here (sync_replicas = auto): the
# bound is command_timeout + connect_timeout + sync_timeout, 3 s
cmp_ok($dtook, '<', 4, sprintf('within the bound (%.1f s)', $dtook));
my $retried = stat_of($na, 'cluster_retries') - $retries1;
cmp_ok($retried, '<', 300, "tried again with a pause, not in a loop ($retried times)");
is($na->safe_psql('postgres', "BEGIN; SELECT rlock_try('$warm_key'); COMMIT"), 't',
	'a key of another primary is taken meanwhile');
is($down->cmd('CLUSTER', 'ADDSLOTS', $spare_slot), 'OK', 'the slot is given back');
ok( RlockTest::wait_until(
		sub { $na->safe_psql('postgres', "BEGIN; SELECT rlock_try('$dk'); COMMIT") eq 't' }, 20),
	'the key of that primary is taken again');

#---- a primary frozen, the rest up ----

my $frozen = $primaries[1];
my $cold = $by_port{ $frozen->port }[3];
my $warm = $by_port{ $primaries[2]->port }[3];
$frozen->freeze;
my $t0 = time;
my ($ret, $stdout, $stderr) = $na->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT rlock_try('$cold')");
my $took = time - $t0;
like($stderr, qr/58030/, "a key of the frozen primary fails with 58030");
cmp_ok($took, '<', 4, sprintf('within command_timeout + connect_timeout + sync_timeout (%.1f s)', $took));
is($na->safe_psql('postgres', "SELECT rlock_try('$warm')"), 't',
	'a key of another primary is taken meanwhile');
$frozen->thaw;
ok( RlockTest::wait_until(
		sub { $na->safe_psql('postgres', "SELECT rlock_try('$cold')") eq 't' }, 20),
	'the key of the thawed primary is taken again');

# never a script over keys of two slots, nor a redirection loop that
# ended in an error
my $crossslot = 0;
for my $p (@primaries)
{
	my $errors = $p->cmd('INFO', 'errorstats');
	$crossslot++ if !ref $errors && $errors =~ /errorstat_CROSSSLOT/;
}
is($crossslot, 0, 'no primary ever answered CROSSSLOT');

is($na->safe_psql('postgres', 'SELECT pg_backend_pid() > 0'), 't', 'the instance is up');
unlike(slurp_file($na->logfile), qr/TRAP|terminated by signal/, 'no crash in the log');

$na->stop;
$c->stop;
$cluster->stop;
done_testing();
