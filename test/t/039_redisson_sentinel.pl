# The real Redisson configured for Sentinel (useSentinelServers) and rlock
# with rlock.topology = sentinel on the same deployment: a primary, two
# replicas and three Sentinels, passwords on both.  For each Redisson
# version of RlockTest::Redisson: each side excludes the other and wakes
# the other's waiter, before a SENTINEL FAILOVER and across it.
use strict;
use warnings;

use File::Temp ();
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redisson;
use RlockTest::Sentinel;

plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

mkdir "$PostgreSQL::Test::Utils::tmp_check/redis";
my $dep = RlockTest::Sentinel->start(
	dir => "$PostgreSQL::Test::Utils::tmp_check/redis",
	data_password => 'datapw',
	sentinel_password => 'sentpw',
	down_after_ms => 1000,
	failover_timeout_ms => 4000,
	args => [ '--repl-diskless-sync-delay', '0' ]);
my $node = RlockTest::node('rs', $dep->data_nodes->[0],
	conf => [
		"rlock.topology = 'sentinel'",
		"rlock.nodes = '" . $dep->nodes_setting . "'",
		"rlock.sentinel_master = 'main'",
		"rlock.sentinel_password_file = '"
		  . RlockTest::password_file(File::Temp::tempdir(CLEANUP => 1), 'sentpw') . "'",
		"rlock.password_file = '"
		  . RlockTest::password_file(File::Temp::tempdir(CLEANUP => 1), 'datapw') . "'" ]);
ok(RlockTest::wait_for_redis($node, 15), 'rlock finds the primary');

sub sql { return $node->safe_psql('postgres', $_[0]) }


# Both directions on lock $key: exclusion, and a waiter on each side
# woken by the other side's release.  $when names the moment.
sub both_ways
{
	my ($java, $v, $key, $when) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);

	# Redisson holds: SQL is refused, then waits and is woken by unlock()
	is($java->call('a.1', 'trylock', $key, 0), 'true', "$v $when: Redisson takes $key");
	is(sql("BEGIN; SELECT rlock_try('$key'); COMMIT"), 'f',
		"$v $when: rlock_try is refused");
	RlockTest::send_query($s, "BEGIN; SELECT rlock_try('$key', '30s');");
	ok(RlockTest::waiting_in_sql($node, $key), "$v $when: a transaction waits");
	$java->call('a.1', 'unlock', $key);
	my ($out, $err) = RlockTest::collect($s);
	is($out, 't', "$v $when: unlock() wakes the transaction, which gets it")
	  or diag($err);

	# SQL holds: Redisson is refused, then waits and is woken by COMMIT
	is($java->call('b.1', 'trylock', $key, 0), 'false',
		"$v $when: tryLock is refused while the transaction holds it");
	my $id = $java->send('b.1', 'trylock', $key, 30000);
	ok(RlockTest::wait_until(sub { $dep->primary->subscribers($key) >= 1 }, 10),
		"$v $when: Redisson's tryLock waits, subscribed on the primary");
	$s->query_safe('COMMIT');
	my $r = $java->result($id, 20);
	ok($r && $r->{ok} && $r->{value} eq 'true',
		"$v $when: the commit wakes tryLock, which gets it")
	  or diag(explain($r));
	$java->call('b.1', 'unlock', $key);
	$s->quit;
}

for my $version (@RlockTest::Redisson::VERSIONS)
{
	my $java = RlockTest::Redisson->start_sentinel($dep,
		version => $version,
		data_password => 'datapw',
		sentinel_password => 'sentpw');
	is($java->version, $version, "Redisson $version runs with useSentinelServers");
	my $v = "[$version]";

	both_ways($java, $v, "rs:$version", 'before a failover');

	# across a failover: a Redisson hold, a SQL waiter on it, and the
	# reverse, all through SENTINEL FAILOVER
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$java->call('a.1', 'lock', "rs:j:$version");
	RlockTest::send_query($s, "BEGIN; SELECT rlock_try('rs:j:$version', '60s');");
	ok(RlockTest::waiting_in_sql($node, "rs:j:$version"), "$v a transaction waits on Redisson's lock");
	my $t = $node->background_psql('postgres', on_error_stop => 0);
	$t->query_safe("BEGIN; SELECT rlock_lock('rs:s:$version')");
	my $jid = $java->send('b.1', 'trylock', "rs:s:$version", 60000);
	ok(RlockTest::wait_until(
			sub { $dep->primary->subscribers("rs:s:$version") >= 1 }, 10),
		"$v Redisson waits on the transaction's lock");

	my $old = $dep->primary;
	my $new = $dep->failover(timeout => 30);
	isnt($new->port, $old->port, "$v SENTINEL FAILOVER promoted a replica");
	ok(RlockTest::wait_until(
			sub {
				sql("SELECT redis_address FROM rlock_status() WHERE command_connection = 'ready'")
				  =~ /:${\ $new->port}$/;
			},
			15),
		"$v rlock follows the failover");
	is(scalar(keys %{ $new->holds("rs:j:$version") }), 1,
		"$v Redisson's hold is on the new primary");

	# Redisson finds the new primary by polling the Sentinels; until it
	# has, it writes to the old one, which takes writes until the
	# Sentinels convert it.  After the conversion both sides must be on
	# the new primary.
	ok($dep->wait_converted($old, 30), "$v the old primary became a replica");
	ok(RlockTest::wait_until(
			sub {
				$new->subscribers("rs:s:$version") >= 1
				  && $new->subscribers("rs:j:$version") >= 1;
			},
			20),
		"$v both waiters are subscribed on the new primary");
	$java->call('a.1', 'unlock', "rs:j:$version");
	my ($out, $err) = RlockTest::collect($s);
	is($out, 't', "$v unlock() after the failover wakes the transaction")
	  or diag($err);
	$s->query_safe('COMMIT');
	$t->query_safe('COMMIT');
	my $r = $java->result($jid, 30);
	ok($r && $r->{ok} && $r->{value} eq 'true',
		"$v the commit after the failover wakes Redisson's tryLock")
	  or diag(explain($r));
	$java->call('b.1', 'unlock', "rs:s:$version");
	$s->quit;
	$t->quit;

	both_ways($java, $v, "rs2:$version", 'after the failover');
	$java->stop;
}

$node->stop;
$dep->stop;
done_testing();
