# Deadlock detection under load within one instance: no false victim,
# and each planted cycle broken exactly once.
#
# deadlock_timeout is 50 ms, so that most waits of the storm outlast it
# and look for a cycle, several times.  For 20 s:
#
# - a storm without cycles: 16 pgbench clients, each transaction taking
#   one of 25 keys (exclusive, or shared half the time), then one of 25
#   others as a fair lock, then a row of 50, holding them 0 to 60 ms: the
#   same order for all, so no cycle can form; chains of waits through
#   rlocks, shared holds and rows are everywhere.  Not one 40P01;
# - beside it, planted cycles, one at a time: two sessions crossing two
#   rlocks, and an rlock crossed with a row: each broken by exactly one
#   40P01, the other session committing.
#
# pg_stat_database.deadlocks counts the planted cycles, nothing else;
# nothing is left held or waiting.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'deadlock detection reads no Redis: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $seconds = 20;
my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('storm', $redis,
	conf => [ "deadlock_timeout = '50ms'", 'log_min_messages = warning',
		'max_connections = 40' ]);
$node->safe_psql('postgres', q{
	CREATE TABLE rows (id int PRIMARY KEY, v int);
	INSERT INTO rows SELECT g, 0 FROM generate_series(1, 51) g;
});
my $before = $node->safe_psql('postgres',
	"SELECT deadlocks FROM pg_stat_database WHERE datname = 'postgres'");

my $script = RlockTest::deadlock_free_script(PostgreSQL::Test::Utils::tempdir, 'storm:', 60);

my $out = '';
my $storm = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '16', '-j', '2', '-T', $seconds, '-f', $script,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'<', \undef, '>&', \$out);

# Planted cycles, one at a time, until the storm ends
my @s = map { RlockTest::session($node) } 1 .. 2;
my ($planted, $broken_once, $rounds) = (0, 0, 0);
my $end = time + $seconds - 2;
while (time < $end)
{
	my ($x, $y) = $rounds % 2 ? @s : reverse @s;
	my $mixed = $rounds % 3 == 2;
	$rounds++;
	if ($mixed)
	{
		# $y holds row 51, $x the rlock; $x waits for the row, $y for the rlock
		$y->query_safe("BEGIN; UPDATE rows SET v = v + 1 WHERE id = 51");
		$x->query_safe("BEGIN; SELECT rlock_try('planted:m')");
		RlockTest::send_query($x, "UPDATE rows SET v = v + 1 WHERE id = 51; COMMIT;");
		RlockTest::send_query($y, "SELECT rlock_try('planted:m', '30 s'); COMMIT;");
	}
	else
	{
		$x->query_safe("BEGIN; SELECT rlock_try('planted:1')");
		$y->query_safe("BEGIN; SELECT rlock_try('planted:2')");
		RlockTest::send_query($x, "SELECT rlock_try('planted:2', '30 s'); COMMIT;");
		RlockTest::send_query($y, "SELECT rlock_try('planted:1', '30 s'); COMMIT;");
	}
	$planted++;
	my @err = map { (RlockTest::collect($_))[1] } ($x, $y);
	my $victims = grep { /40P01/ } @err;
	$broken_once++ if $victims == 1;
	note("planted cycle $rounds: " . join(' / ', map { /(\d{5}): ([^\n]*)/ ? "$1 $2" : 'no error' } @err))
	  unless $victims == 1;
}

$storm->finish;
my ($txns) = $out =~ /number of transactions actually processed: (\d+)/;
my ($failed) = $out =~ /number of failed transactions: (\d+)/;
my @aborted = $out =~ /^pgbench: error: (client \d+ aborted[^\n]*)/mg;
note("storm: " . ($txns // 'no') . ' transactions');
cmp_ok($txns // 0, '>', 100, 'the storm ran');
is(scalar @aborted, 0, 'no storm client stopped on an error') or diag(join("\n", @aborted));
is($failed // 0, 0, 'no storm transaction failed (not one 40P01 without a cycle)')
  or diag($out);
unlike(slurp_file($node->logfile),
	qr/ERROR:  deadlock detected\n[^\n]*\n[^\n]*storm:/,
	'no deadlock reported through a key of the storm');
cmp_ok($planted, '>=', 5, "$planted cycles were planted");
is($broken_once, $planted, 'each planted cycle was broken by exactly one 40P01');

# the victims' counts reach the statistics at their next statement's end
$_->query_safe('SELECT pg_stat_force_next_flush()') for @s;
$_->query_safe('SELECT 1') for @s;
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT deadlocks FROM pg_stat_database WHERE datname = 'postgres'")
			  == $before + $planted;
		},
		15),
	'pg_stat_database counts the planted cycles and nothing else');
is($node->safe_psql('postgres', 'SELECT count(*) FROM rlock_locks'), 0,
	'nothing left held or waiting');

$_->quit for @s;
$node->stop;
$redis->stop;
done_testing();
