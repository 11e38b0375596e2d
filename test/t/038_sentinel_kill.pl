# A primary killed (SIGKILL) under load, behind three Sentinels, with
# rlock.sync_replicas = 1 and then 0; two PostgreSQL instances guard one
# counter lock with pgbench the whole time.
#
# - sync_replicas = 1: no two critical sections overlap, none is lost at
#   commit; a hold and its waiter in the other instance survive the kill;
#   new requests are served again at most FOLLOW_BOUND seconds after the
#   Sentinels name the new primary;
# - sync_replicas = 0: the same run again; what the loss window allowed
#   (sections that overlapped, locks lost at commit) is printed, and no
#   overlap ever reaches a committed transaction.

use strict;
use warnings;

use File::Temp ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Sentinel;

if (RlockTest::TLS::everywhere())
{
	plan skip_all => 'Sentinels speak plain TCP here';
}

# From the moment a Sentinel names the new primary to the first lock
# granted there: +switch-master or the next poll (1 s), a connection and
# its handshake, the resync of what rlock held.
my $FOLLOW_BOUND = 3;

mkdir "$PostgreSQL::Test::Utils::tmp_check/redis";
my $dep = RlockTest::Sentinel->start(
	dir => "$PostgreSQL::Test::Utils::tmp_check/redis",
	replicas => 2,
	sentinels => 3,
	data_password => 'datapw',
	down_after_ms => 1000,
	failover_timeout_ms => 4000,
	args => [ '--repl-diskless-sync-delay', '0' ]);
my $dir = File::Temp::tempdir(CLEANUP => 1);
my $data_pw = RlockTest::password_file($dir, 'datapw');

sub instance
{
	my ($name) = @_;
	return RlockTest::node($name, $dep->data_nodes->[0],
		conf => [
			"rlock.topology = 'sentinel'",
			"rlock.nodes = '" . $dep->nodes_setting . "'",
			"rlock.sentinel_master = 'main'",
			"rlock.password_file = '$data_pw'",
			"rlock.sync_replicas = '1'" ]);
}

my $na = instance('kill_a');
my $nb = instance('kill_b');
ok(RlockTest::wait_for_redis($_, 15), $_->name . ' finds the primary')
  for ($na, $nb);

sub address_port
{
	my ($node) = @_;
	my $a = $node->safe_psql('postgres',
		"SELECT redis_address FROM rlock_status() WHERE command_connection = 'ready'");
	return $a =~ /:(\d+)$/ ? $1 : '';
}

# Kill the primary ($how 'kill') or ask the Sentinels for a failover
# ('failover'); then, every 20 ms, note when a Sentinel first names
# another one and when instance $node, following it there, first grants
# a new lock.  Returns (new primary, old primary, seconds from the kill or
# request to the naming, from the naming to a grant).
sub kill_and_follow
{
	my ($node, $how) = @_;
	my $old = $dep->primary;
	my $probe = $node->background_psql('postgres', on_error_stop => 0);
	my $killed_at = time;
	if ($how eq 'kill')
	{
		$old->kill9;
	}
	else
	{
		# NOGOODSLAVE until the Sentinels have fresh news of a replica
		RlockTest::wait_until(
			sub {
				my $r = $dep->sentinel_cmd(0, 'SENTINEL', 'FAILOVER', 'main');
				die "SENTINEL FAILOVER: $r->{error}\n"
				  if ref $r eq 'HASH' && $r->{error} !~ /^NOGOODSLAVE/;
				return ref $r ne 'HASH';
			},
			10)
		  or die 'SENTINEL FAILOVER found no replica to promote';
	}
	my ($named_at, $named_port, $served_at, $n);
	while (time < $killed_at + 30 && !defined $served_at)
	{
		if (!defined $named_at)
		{
			for my $i (0 .. 2)
			{
				my $a = eval {
					$dep->sentinel_cmd($i, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', 'main');
				};
				if (ref $a eq 'ARRAY' && $a->[1] != $old->rlock_port)
				{
					$named_at = time;
					$named_port = $a->[1];
					last;
				}
			}
		}
		else
		{
			$n++;
			my $got = $probe->query(
				"SELECT redis_address LIKE '%:$named_port' AND rlock_try('probe:$n') FROM rlock_status()");
			$served_at = time if defined $got && $got eq 't';
		}
		usleep(20_000) unless defined $served_at;
	}
	$probe->quit;
	die 'the Sentinels named no new primary' unless defined $named_at;
	die "rlock served nothing on the new primary within 30 s ($how)"
	  unless defined $served_at;
	my $new = $dep->wait_switch($old->rlock_port, 30);
	return ($new, $old, $named_at - $killed_at, $served_at - $named_at);
}

# Guarded load on both instances for 14 s, the primary killed (or failed
# over, $how) after 3; prints what happened and checks the bound to serve
# again.  Returns the new primary, the old one and the load's summary.
sub killed_under_load
{
	my ($label, $follow, $how) = @_;
	my $runs = RlockTest::guarded_load_start([ $na, $nb ], 'kill:counter',
		seconds => 14, dir => $dir);
	sleep 3;
	my ($new, $old, $to_named, $to_served) =
	  kill_and_follow($follow, $how // 'kill');
	my $load = RlockTest::guarded_load_finish($runs);
	diag(sprintf('%s: Sentinels named the new primary %.1f s after the %s; '
		  . 'rlock granted a lock %.2f s later; %d sections ran, %d committed, '
		  . '%d overlapped, %d lost at commit, %d pgbench clients aborted',
		$label, $to_named, $how // 'kill', $to_served, scalar(@{ $load->{ran} }),
		scalar(@{ $load->{committed} }), $load->{ran_overlaps},
		$load->{failed}, $load->{aborted}));
	cmp_ok($to_served, '<', $FOLLOW_BOUND,
		"$label: new requests served within $FOLLOW_BOUND s of the Sentinels naming the new primary");
	cmp_ok(scalar(@{ $load->{committed} }), '>', 50, "$label: the load ran");
	return ($new, $old, $load);
}

#---- sync_replicas = 1 ----

# a hold across the kill, and its waiter in the other instance
my $holder = $na->background_psql('postgres', on_error_stop => 0);
$holder->query_safe('\set VERBOSITY verbose');
$holder->query_safe("BEGIN; SELECT rlock_lock('kill:held')");
my $waiter = $nb->background_psql('postgres', on_error_stop => 0);
$waiter->query_safe('\set VERBOSITY verbose');
RlockTest::send_query($waiter, "BEGIN; SELECT rlock_try('kill:held', '60s');");
ok(RlockTest::wait_until(sub { $dep->primary->subscribers('kill:held') >= 1 }, 10),
	'the waiter is subscribed on the primary');

my ($new, $old, $load) = killed_under_load('sync_replicas = 1', $na);
is($load->{ran_overlaps}, 0, 'sync_replicas = 1: no two critical sections overlapped');
is($load->{failed}, 0, 'sync_replicas = 1: no lock lost at commit');
is($load->{aborted}, 0, 'no pgbench client aborted')
  or diag($load->{output});
ok(RlockTest::wait_until(sub { address_port($na) eq $new->rlock_port }, 10),
	'rlock_status names the new primary');

is(scalar(keys %{ $new->holds('kill:held') }), 1,
	'the hold is on the new primary');
$holder->query('COMMIT');
is($holder->{stderr}, '', 'the holder commits cleanly: the lock was kept');
my ($wout, $werr) = RlockTest::collect($waiter);
is($wout, 't', 'its waiter in the other instance got the lock after the kill')
  or diag($werr);
$waiter->query('COMMIT');

#---- sync_replicas = 0 ----

$dep->restart_node($old);
for my $node ($na, $nb)
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET rlock.sync_replicas = 'off'; SELECT pg_reload_conf()");
	ok(RlockTest::wait_until(
			sub {
				$node->safe_psql('postgres', 'SELECT sync_connection FROM rlock_status()')
				  eq 'unused';
			},
			10),
		$node->name . ': sync_replicas off taken');
}
($new, $old, $load) = killed_under_load('sync_replicas = 0', $nb);
is($load->{committed_overlaps}, 0,
	'sync_replicas = 0: no overlap reached a committed transaction');
is($load->{aborted}, 0, 'no pgbench client aborted')
  or diag($load->{output});

# the same with SENTINEL FAILOVER: the old primary takes writes until the
# Sentinels convert it, about 10 s later
$dep->restart_node($old);
($new, $old, $load) =
  killed_under_load('sync_replicas = 0, SENTINEL FAILOVER', $na, 'failover');
is($load->{committed_overlaps}, 0,
	'sync_replicas = 0, SENTINEL FAILOVER: no overlap reached a committed transaction');
is($load->{aborted}, 0, 'no pgbench client aborted')
  or diag($load->{output});
ok($dep->wait_converted($old, 30), 'the old primary became a replica');

#---- a try on the wire when the primary froze ----

# It goes unanswered: the request was never told the lock is busy, so it
# is no waiter that keeps its place through a failover (only those do,
# for rlock.failover_timeout): it fails after rlock.command_timeout +
# rlock.connect_timeout (1 s here), before the failover ends, and a new
# try on the new primary gets the lock once its holder commits.
$nb->safe_psql('postgres', q{
	ALTER SYSTEM SET rlock.command_timeout = '500ms';
	ALTER SYSTEM SET rlock.connect_timeout = '500ms';
	SELECT pg_reload_conf()});
$holder->query_safe("BEGIN; SELECT rlock_lock('kill:frozen')");
ok(RlockTest::wait_until(
		sub {
			!grep { (eval { $_->cmd('EXISTS', 'kill:frozen') } // 0) != 1 }
			  grep { $_->pid } $dep->replicas_now;
		},
		10),
	'the hold reached the replicas');
my $frozen = $dep->primary;
$frozen->freeze;
RlockTest::send_query($waiter, "BEGIN; SELECT rlock_try('kill:frozen', '60s');");
($wout, $werr) = RlockTest::collect($waiter);
like($werr, qr/ERROR:  58030: could not reach Redis for lock "kill:frozen"/,
	'the try the frozen primary swallowed fails with 58030, within its bound');
$waiter->{stderr} = '';
$waiter->query('ROLLBACK');
my $promoted = $dep->wait_switch($frozen->rlock_port, 30);
ok(RlockTest::wait_until(sub { address_port($na) eq $promoted->rlock_port }, 10),
	'the holder\'s instance follows the failover');
RlockTest::send_query($waiter, "BEGIN; SELECT rlock_try('kill:frozen', '60s');");
ok(RlockTest::waiting_in_sql($nb, 'kill:frozen'),
	'tried again, it waits on the new primary');
$holder->query('COMMIT');
is($holder->{stderr}, '', 'the holder commits on the new primary');
($wout, $werr) = RlockTest::collect($waiter);
is($wout, 't', 'and the waiter gets the lock')
  or diag($werr);
$waiter->query('COMMIT');
$frozen->thaw;
ok($dep->wait_converted($frozen, 30), 'the frozen primary became a replica');

#---- no Sentinel left to name a new primary ----

# A waiter keeps its place through a failover only while a Sentinel
# answers: with all of them down, the primary's loss ends its wait within
# rlock.connect_timeout twice over (1 s in the first instance, 0.5 s in
# the second), and a bound.
$holder->query_safe("BEGIN; SELECT rlock_lock('kill:last')");
RlockTest::send_query($waiter, "BEGIN; SELECT rlock_try('kill:last', '60s');");
ok(RlockTest::wait_until(sub { $dep->primary->subscribers('kill:last') >= 1 }, 10),
	'a waiter is subscribed');
my $last = $dep->primary;
$dep->stop_sentinel($_) for 0 .. 2;
my $t0 = time;
$last->kill9;
($wout, $werr) = RlockTest::collect($waiter);
my $took = time - $t0;
like($werr, qr/ERROR:  58030: could not reach Redis for lock "kill:last"/,
	'no Sentinel answers: the waiter fails with 58030');
cmp_ok($took, '<', 2 + 3, "within twice rlock.connect_timeout and a bound ($took s)");
$waiter->query('ROLLBACK');
$holder->query('ROLLBACK');

$holder->quit;
$waiter->quit;
$_->stop for ($na, $nb);
$dep->stop;
done_testing();
