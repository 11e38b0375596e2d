# A Redis Cluster primary failed over under load: CLUSTER FAILOVER on a
# replica, then a SIGKILL of the new primary; three primaries with two
# replicas each (so that one is left to confirm after the kill),
# rlock.sync_replicas = 1, two PostgreSQL instances guarding one lock of
# that primary with pgbench the whole time.
#
# - no two critical sections overlap, none is lost at commit;
# - a hold and its waiter in the other instance survive the failover: the
#   hold was confirmed by the replica, the waiter is woken on the new
#   primary;
# - new requests are served on the new primary at most FOLLOW_BOUND
#   seconds after the cluster promoted it (printed with the times).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Cluster;

# From the promotion to the first lock granted there: the primary's
# connection lost or refused (READONLY), the map asked again (at most
# every 100 ms once asked for), a connection and its handshake.
my $FOLLOW_BOUND = 3;

my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 2,
	node_timeout_ms => 2000);
my @primaries = $cluster->primaries;
# in the TLS round the cluster and rlock speak TLS (RlockTest::Cluster)
my $seeds = join(',', map { '127.0.0.1:' . $_->rlock_port } @primaries);

sub instance
{
	my ($name) = @_;
	return RlockTest::node($name, $primaries[0],
		conf => [
			"rlock.topology = 'cluster'",
			"rlock.nodes = '$seeds'",
			"rlock.sync_replicas = '1'",
			"rlock.sync_timeout = '1s'" ]);
}

my $na = instance('cf_a');
my $nb = instance('cf_b');
ok(RlockTest::wait_for_cluster_map($_, 3), $_->name . ' learnt the map')
  for ($na, $nb);

# Keys of the first primary
my @keys = grep { $cluster->owner($cluster->slot($_))->port == $primaries[0]->port }
  map { "cf:$_" } 0 .. 200;
my ($guarded, $held) = @keys[ 0, 1 ];

# Fail the primary of $key over ($how: 'failover' or 'kill') while a probe
# on $node tries new locks on keys of that primary every 20 ms; returns
# the new primary and the seconds from the request to the promotion and
# from the promotion to the first grant.
sub fail_over
{
	my ($node, $key, $how) = @_;
	my $old = $cluster->owner($cluster->slot($key));
	my $replica = $cluster->replica_of($old) or die 'no replica';
	# any of its replicas may be promoted after a kill
	my $id = $cluster->id_of($old);
	my $view = $cluster->view($old);
	my @replicas = grep { defined }
	  map { $view->{$_}{master_id} eq $id ? $cluster->_node_by_port($_) : undef }
	  keys %$view;
	my $probe = $node->background_psql('postgres', on_error_stop => 0);
	my $t0 = time;
	my $promoted_at;
	if ($how eq 'kill')
	{
		$old->kill9;
	}
	else
	{
		my $r = $replica->cmd('CLUSTER', 'FAILOVER');
		die "CLUSTER FAILOVER: $r->{error}" if ref $r eq 'HASH';
	}
	my ($served_at, $n);
	while (time < $t0 + 40 && !defined $served_at)
	{
		if (!defined $promoted_at)
		{
			for my $r (@replicas)
			{
				my $role = eval { $r->cmd('ROLE') };
				next unless ref $role eq 'ARRAY' && $role->[0] eq 'master';
				$promoted_at = time;
				$replica = $r;
				last;
			}
		}
		else
		{
			$n++;
			# a key of the same slot, by its hash tag
			my $got = $probe->query("SELECT rlock_try('{$key}:probe:$n')");
			$served_at = time if defined $got && $got eq 't';
		}
		usleep(20_000) unless defined $served_at;
	}
	$probe->quit;
	die "the replica was not promoted ($how)" unless defined $promoted_at;
	die "rlock served nothing after the promotion ($how)" unless defined $served_at;
	$cluster->_wait_promoted($replica, 40);
	return ($replica, $old, $promoted_at - $t0, $served_at - $promoted_at);
}

sub under_load
{
	my ($how, $label) = @_;
	$label //= $how;
	my $runs = RlockTest::guarded_load_start([ $na, $nb ], $guarded, seconds => 14);
	sleep 3;
	my ($new, $old, $to_promoted, $to_served) = fail_over($na, $guarded, $how);
	my $load = RlockTest::guarded_load_finish($runs);
	diag(sprintf('%s: the replica was promoted %.1f s after the %s; rlock granted '
		  . 'a lock there %.2f s later; %d sections ran, %d committed, %d overlapped, '
		  . '%d lost at commit, %d pgbench clients aborted',
		$label, $to_promoted, $how eq 'kill' ? 'kill' : 'request', $to_served,
		scalar(@{ $load->{ran} }), scalar(@{ $load->{committed} }),
		$load->{ran_overlaps}, $load->{failed}, $load->{aborted}));
	cmp_ok($to_served, '<', $FOLLOW_BOUND,
		"$label: new requests served within $FOLLOW_BOUND s of the promotion");
	cmp_ok(scalar(@{ $load->{committed} }), '>', 50, "$label: the load ran");
	is($load->{aborted}, 0, "$label: no pgbench client aborted") or diag($load->{output});
	return ($new, $old, $load);
}

#---- CLUSTER FAILOVER, with a hold and its waiter across it ----

my $holder = $na->background_psql('postgres', on_error_stop => 0);
$holder->query_safe('\set VERBOSITY verbose');
$holder->query_safe("BEGIN; SELECT rlock_lock('$held')");
my $waiter = $nb->background_psql('postgres', on_error_stop => 0);
$waiter->query_safe('\set VERBOSITY verbose');
RlockTest::send_query($waiter, "BEGIN; SELECT rlock_try('$held', '60s');");
ok( RlockTest::wait_until(
		sub {
			my $r = $primaries[0]->cmd('PUBSUB', 'SHARDNUMSUB',
				"redisson_lock__channel:{$held}");
			ref $r eq 'ARRAY' && $r->[1] == 1;
		},
		10),
	'the waiter is subscribed on the primary');

my ($new, $old, $load) = under_load('failover', 'sync_replicas = 1, CLUSTER FAILOVER');
is($load->{ran_overlaps}, 0, 'sync_replicas = 1: no two critical sections overlapped');
is($load->{failed}, 0, 'sync_replicas = 1: no lock lost at commit');
is(scalar(@{ $new->owners($held) }), 1, 'the hold is on the new primary');
$holder->query('COMMIT');
is($holder->{stderr}, '', 'the holder commits cleanly: the lock was kept');
my ($wout, $werr) = RlockTest::collect($waiter);
is($wout, 't', 'its waiter in the other instance got the lock after the failover')
  or diag($werr);
$waiter->query('COMMIT');
$holder->quit;
$waiter->quit;

#---- the new primary killed ----

($new, $old, $load) = under_load('kill', 'sync_replicas = 1, SIGKILL');
is($load->{ran_overlaps}, 0, 'sync_replicas = 1, SIGKILL: no two critical sections overlapped');
is($load->{failed}, 0, 'sync_replicas = 1, SIGKILL: no lock lost at commit');

#---- and once more with sync_replicas = off ----

# what the window between a grant and its replication allowed is
# printed; a lock lost in it is caught at commit (40001), so no overlap
# reaches a committed transaction
for my $node ($na, $nb)
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET rlock.sync_replicas = 'off'; SELECT pg_reload_conf()");
	ok( RlockTest::wait_until(
			sub {
				$node->safe_psql('postgres', 'SELECT sync_connection FROM rlock_status()')
				  eq 'unused';
			},
			10),
		$node->name . ': sync_replicas off taken');
}
($new, $old, $load) = under_load('kill', 'sync_replicas = off, SIGKILL');
is($load->{committed_overlaps}, 0,
	'sync_replicas = off: no overlap reached a committed transaction');

is($na->safe_psql('postgres', 'SELECT pg_backend_pid() > 0'), 't', 'the instance is up');
unlike(slurp_file($na->logfile), qr/TRAP|terminated by signal/, 'no crash in the log');

$na->stop;
$nb->stop;
$cluster->stop;
done_testing();
