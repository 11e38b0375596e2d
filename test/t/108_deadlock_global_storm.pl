# Deadlock detection across instances under load (make test-long): no
# false victim, and each planted cycle broken exactly once.
#
# Two instances sharing a Redis, rlock.deadlock_detection = global,
# deadlock_timeout 100 ms, for 60 s:
#
# - a storm without cycles: 16 pgbench clients on each instance, each
#   transaction taking one of 25 keys (exclusive, or shared half the
#   time), then one of 25 others as a fair lock, then a row of its own
#   instance, holding them 0 to 150 ms: one order for all, so no cycle
#   can form, and waits across the instances everywhere.  Not one 40P01;
# - beside it, cycles planted one at a time across the instances: two
#   rlocks crossed, and two rlocks with a row wait closing the cycle:
#   each broken by exactly one 40P01.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'the search needs no TLS of its own: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $seconds = 60;
my $redis = RlockTest::Redis->start;
my @conf = ("deadlock_timeout = '100ms'", "rlock.deadlock_detection = global",
	'log_min_messages = warning', 'max_connections = 40');
my @nodes = map { RlockTest::node($_, $redis, conf => \@conf) } qw(east west);
my $script = RlockTest::deadlock_free_script(PostgreSQL::Test::Utils::tempdir, 'gstorm:', 150);

my (@storm, @out);
for my $i (0 .. 1)
{
	$nodes[$i]->safe_psql('postgres', q{
		CREATE TABLE rows (id int PRIMARY KEY, v int);
		INSERT INTO rows SELECT g, 0 FROM generate_series(1, 51) g;
	});
	$out[$i] = '';
	push @storm, IPC::Run::start(
		[ 'pgbench', '-n', '-c', '16', '-j', '2', '-T', $seconds, '-f', $script,
		  '-h', $nodes[$i]->host, '-p', $nodes[$i]->port, 'postgres' ],
		'<', \undef, '>&', \$out[$i]);
}

# Planted cycles, one at a time, until the storm ends: x on east, y on
# west; z (east) holds row 51 of east when the cycle is mixed
my $x = RlockTest::session($nodes[0]);
my $y = RlockTest::session($nodes[1]);
my $z = RlockTest::session($nodes[0]);
my ($planted, $broken_once, $rounds) = (0, 0, 0);
my $end = time + $seconds - 5;
while (time < $end)
{
	my $mixed = $rounds++ % 2;
	my @waiting;
	if ($mixed)
	{
		# y holds p:b and waits for p:a; x holds p:a and waits for row 51
		# of east, held by z, which waits for p:b
		$z->query_safe("BEGIN; UPDATE rows SET v = v + 1 WHERE id = 51");
		$x->query_safe("BEGIN; SELECT rlock_try('gplanted:a')");
		$y->query_safe("BEGIN; SELECT rlock_try('gplanted:b')");
		RlockTest::send_query($x, "UPDATE rows SET v = v + 1 WHERE id = 51; COMMIT;");
		RlockTest::send_query($y, "SELECT rlock_try('gplanted:a', '30 s'); COMMIT;");
		RlockTest::send_query($z, "SELECT rlock_try('gplanted:b', '30 s'); COMMIT;");
		@waiting = ($x, $y, $z);
	}
	else
	{
		$x->query_safe("BEGIN; SELECT rlock_try('gplanted:a')");
		$y->query_safe("BEGIN; SELECT rlock_try('gplanted:b')");
		RlockTest::send_query($x, "SELECT rlock_try('gplanted:b', '30 s'); COMMIT;");
		RlockTest::send_query($y, "SELECT rlock_try('gplanted:a', '30 s'); COMMIT;");
		@waiting = ($x, $y);
	}
	$planted++;
	my @err = map { (RlockTest::collect($_))[1] } @waiting;
	my $victims = grep { /40P01/ } @err;
	$broken_once++ if $victims == 1;
	note("planted cycle $rounds: " . join(' / ', map { /(\d{5}): ([^\n]*)/ ? "$1 $2" : 'no error' } @err))
	  unless $victims == 1;
}

$_->finish for @storm;
for my $i (0 .. 1)
{
	my $name = $nodes[$i]->name;
	my ($txns) = $out[$i] =~ /number of transactions actually processed: (\d+)/;
	my ($failed) = $out[$i] =~ /number of failed transactions: (\d+)/;
	my @aborted = $out[$i] =~ /^pgbench: error: (client \d+ aborted[^\n]*)/mg;
	note("storm on $name: " . ($txns // 'no') . ' transactions');
	cmp_ok($txns // 0, '>', 100, "the storm ran on $name");
	is(scalar @aborted, 0, "no storm client of $name stopped on an error")
	  or diag(join("\n", @aborted));
	is($failed // 0, 0, "no storm transaction of $name failed (not one 40P01 without a cycle)")
	  or diag($out[$i]);
}
cmp_ok($planted, '>=', 5, "$planted cycles were planted");
is($broken_once, $planted, 'each planted cycle was broken by exactly one 40P01');
for my $n (@nodes)
{
	is($n->safe_psql('postgres', 'SELECT count(*) FROM rlock_locks'), 0,
		'nothing left held or waiting on ' . $n->name);
}

$_->quit for ($x, $y, $z);
$_->stop for @nodes;
$redis->stop;
done_testing();
