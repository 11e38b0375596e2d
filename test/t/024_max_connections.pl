# Every connection the instance allows in use at once: with
# max_connections = 30, one session watches while the 29 others all wait
# with rlock_lock for one key that another client holds (one subscription
# for all of them; a further connection is refused).  When the other client
# lets go, each gets the lock in turn, runs its critical section alone and
# commits; afterwards nothing is left in Redis, and the worker that served
# them all is the one that started.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'max_connections does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $max = 30;
my $nwaiters = $max - 1;
my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('max_connections', $redis,
	conf => ["max_connections = $max"]);
$node->safe_psql('postgres',
	'CREATE TABLE spans (pid int, s timestamptz, e timestamptz)');

# every check goes through this one session: no other connection is free
my $m = $node->background_psql('postgres', on_error_stop => 0);
my $worker = $m->query_safe(
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'rlock worker'");

$redis->cmd('HSET', 'mc:k', 'other:1', 1);
$redis->cmd('PEXPIRE', 'mc:k', 60_000);

my @waiters;
for my $i (1 .. $nwaiters)
{
	my ($out, $err) = ('', '');
	push @waiters,
	  {
		out => \$out,
		err => \$err,
		h => IPC::Run::start(
			[
				'psql', '-X', '-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr('postgres'),
				'-c', 'BEGIN',
				'-c', "SELECT rlock_lock('mc:k')",
				'-c', 'INSERT INTO spans VALUES (pg_backend_pid(), clock_timestamp(), NULL)',
				'-c', 'SELECT pg_sleep(0.01)',
				'-c', 'UPDATE spans SET e = clock_timestamp() WHERE pid = pg_backend_pid()',
				'-c', 'COMMIT'
			],
			'>', \$out, '2>', \$err)
	  };
}

ok( RlockTest::wait_until(
		sub {
			$m->query_safe(
				"SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT rlock_lock(''mc:k'')' AND wait_event_type = 'Extension'"
			) == $nwaiters;
		},
		30),
	"$nwaiters sessions wait for the lock");
is( $m->query_safe(
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"),
	$max, "with the watcher, that is max_connections ($max) backends");
my ($rc, $out, $err) = $node->psql('postgres', 'SELECT 1');
like($err, qr/too many clients/, 'a further connection is refused');
is($redis->subscribers('mc:k'), 1, 'the waiters share one subscription');

$redis->cmd('DEL', 'mc:k');
is($redis->cmd('PUBLISH', 'redisson_lock__channel:{mc:k}', '0'), 1,
	'the other client lets go');
ok( RlockTest::wait_until(
		sub { !grep { RlockTest::still_running($_->{h}) } @waiters }, 60),
	'every waiter gets the lock in turn and ends');
my $failed = 0;
for my $w (@waiters)
{
	$w->{h}->finish;
	unless ($w->{h}->result == 0)
	{
		$failed++;
		diag(${ $w->{err} });
	}
}
is($failed, 0, 'all of them committed');
is($m->query_safe('SELECT count(*) FROM spans WHERE e IS NOT NULL'),
	$nwaiters, 'each ran its critical section');
is( $m->query_safe(q{
		SELECT count(*) FROM (
			SELECT s < lag(e) OVER (ORDER BY s) AS overlap FROM spans) x
		WHERE overlap}),
	'0',
	'and no two of them overlapped');

ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'mc:k') == 0 }, 5),
	'nothing is left in Redis');
ok(RlockTest::wait_for_subscribers($redis, 'mc:k', 0), 'nor subscribed');
is( $m->query_safe(
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'rlock worker'"),
	$worker, 'the worker that served them all is the one that started');
is($m->query_safe("BEGIN; SELECT rlock_try('mc:k'); COMMIT"), 't', 'and it still serves');
$m->quit;

done_testing();
