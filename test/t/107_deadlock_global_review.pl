# Review of the search for deadlocks across instances (worker/wfg.c,
# wfg.lua, test 105) against races, bad data in the graph's keys and
# load.  Two instances share a Redis, deadlock_timeout = 50 ms on both so
# that their workers' searches meet:
#
# - two rlocks crossed between the instances, 30 times: exactly one 40P01
#   each time, the other session commits;
# - the same cycle ended by the bound of one wait (60 to 250 ms), near
#   the time the search needs to confirm it, 20 times: never a victim
#   after that wait ran out, never two (one was: the ended wait's entry
#   stood until its instance's next call, a deadlock_timeout later, and
#   the other instance confirmed the cycle through it; a wait that ends
#   is now withdrawn at once);
# - a holder on the other instance that is merely slow (pg_sleep longer
#   than many deadlock_timeouts): no victim;
# - entries no instance wrote in each of the graph's keys (not msgpack, a
#   msgpack number, an entry of the wrong shape, a key of nil), made
#   without a time to live so that they stay: the workers keep running,
#   the search still finds the next crossed cycle with one victim, and the
#   bad entries are gone (each made every instance's script fail, for as
#   long as it stayed: no search at all);
# - 100 sessions on each instance waiting for a key held on the other one
#   (no cycle), for several deadlock_timeouts: no 40P01, and the cost of
#   each search in Redis (INFO commandstats) is noted and bounded;
# - a chain of 200 waits alternating between the instances, no cycle:
#   each search cost the square of the chain (73 ms a call, Redis busy
#   nearly all the time, the chain 21 s to unwind); now about 11 ms;
# - no crash or failed assertion in the server logs.
use strict;
use warnings;

use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'the search needs no TLS of its own: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my @conf = ("deadlock_timeout = '50ms'", "rlock.deadlock_detection = global",
	'max_connections = 130', 'log_min_messages = warning');
my $n1 = RlockTest::node('one', $redis, conf => \@conf);
my $n2 = RlockTest::node('two', $redis, conf => \@conf);
my %worker = map { $_->name => RlockTest::worker_pid($_) } ($n1, $n2);

my $sa = RlockTest::session($n1);
my $sb = RlockTest::session($n2);

# The sessions that fail with 40P01 among @sessions, pumped until one has
# and a little longer (a second victim would come within a few
# deadlock_timeouts), or for 10 s.
sub victims
{
	my (@sessions) = @_;
	my @v;
	my $deadline = time + 10;
	my $settle;
	while (time < ($settle // $deadline))
	{
		for my $s (@sessions)
		{
			$s->{run}->pump_nb;
			if (!$s->{rlock_victim} && $s->{stderr} =~ /40P01/)
			{
				$s->{rlock_victim} = 1;
				push @v, $s;
				$settle //= time + 0.5;
			}
		}
		usleep(5_000);
	}
	delete $_->{rlock_victim} for @sessions;
	return \@v;
}

# A cycle of two rlocks crossed between the instances; returns the number
# of victims, and whether the other session committed.
sub crossed
{
	my ($k1, $k2) = @_;
	$sa->query_safe("BEGIN; SELECT rlock_try('$k1')");
	$sb->query_safe("BEGIN; SELECT rlock_try('$k2')");
	RlockTest::send_query($sa, "SELECT rlock_try('$k2', '20 s'); COMMIT;");
	RlockTest::waiting_in_sql($n1, $k2);
	RlockTest::send_query($sb, "SELECT rlock_try('$k1', '20 s'); COMMIT;");
	my $v = victims($sa, $sb);
	my $ok = 0;
	for my $s ($sa, $sb)
	{
		my ($out, $err) = RlockTest::collect($s);
		$ok++ if @$v == 1 && $s != $v->[0] && $err !~ /ERROR/ && $out eq 't';
	}
	return (scalar @$v, $ok);
}

#---- crossed rlocks, again and again ----

{
	my ($one, $bad) = (0, 0);
	for my $i (1 .. 30)
	{
		my ($nv, $ok) = crossed("x:$i:1", "x:$i:2");
		if ($nv == 1 && $ok == 1) { $one++ }
		else { $bad++; diag("round $i: $nv victims, $ok committed") }
	}
	is($one, 30, '30 crossed cycles: one victim each, the other commits');
}

#---- cycles that end by themselves about when they are found ----

# b's wait has a bound of 60 to 250 ms, near the time the search needs to
# confirm: b either runs out ('f', the cycle gone, a gets its lock) or
# one of them is the victim.  A victim a after b ran out, or two
# victims, would be false.
{
	my ($false, $outcomes) = (0, '');
	for my $i (1 .. 20)
	{
		my $ms = 60 + 10 * $i;
		$sa->query_safe("BEGIN; SELECT rlock_try('r:$i:1')");
		$sb->query_safe("BEGIN; SELECT rlock_try('r:$i:2')");
		RlockTest::send_query($sa, "SELECT rlock_try('r:$i:2', '20 s'); COMMIT;");
		RlockTest::waiting_in_sql($n1, "r:$i:2");
		RlockTest::send_query($sb, "SELECT rlock_try('r:$i:1', '$ms ms'); COMMIT;");
		my ($aout, $aerr) = RlockTest::collect($sa);
		my ($bout, $berr) = RlockTest::collect($sb);
		my $av = $aerr =~ /40P01/ ? 1 : 0;
		my $bv = $berr =~ /40P01/ ? 1 : 0;
		$outcomes .= $av ? 'a' : $bv ? 'b' : $bout =~ /f/ ? 'f' : '?';
		$false++ if $av + $bv > 1 || ($av && $bout =~ /f/);
	}
	note("outcomes (a, b: victim; f: b ran out): $outcomes");
	is($false, 0, 'cycles ending by themselves: no false or second victim');
}

#---- a slow holder on the other instance ----

{
	$sb->query_safe("BEGIN; SELECT rlock_try('slow:1')");
	RlockTest::send_query($sb, "SELECT pg_sleep(1.5); COMMIT;");
	RlockTest::send_query($sa, "BEGIN; SELECT rlock_try('slow:1', '20 s'); COMMIT;");
	my ($out, $err) = RlockTest::collect($sa);
	is($out, 't', 'a slow holder elsewhere: the waiter gets the lock');
	unlike($err, qr/40P01/, 'and no deadlock');
	RlockTest::collect($sb);
}

#---- entries no instance wrote ----

{
	my $now = int(time * 1000);
	my $far = pack('C Q>', 0xcf, $now + 3_600_000);
	my $at = pack('C Q>', 0xcf, $now);
	my %bad = (
		'junk' => "\xc1\xc1",
		'number' => "\x01",
		'keys-a-number' => "\x95$far$at\xa1d\x01\x90",
		'key-nil' => "\x95$far$at\xa1d\x91\x92\xc0\xa1x\x90",
		'short' => "\x91$far",
		'desc-a-table' => "\x95$far$at\x90\x90\x90");
	$redis->cmd('HSET', 'rlock_wfg:{rlock_wfg}:nodes', $_, $bad{$_})
	  for sort keys %bad;
	$redis->cmd('HSET', 'rlock_wfg:{rlock_wfg}:holds', 'bad:1', "\xc1");
	$redis->cmd('HSET', 'rlock_wfg:{rlock_wfg}:holds', 'bad:2',
		"\x81\xa1u\x93$far$at\x01");
	$redis->cmd('HSET', 'rlock_wfg:{rlock_wfg}:suspects', 'x:1', "\x01");
	$redis->cmd('PERSIST', "rlock_wfg:{rlock_wfg}:$_") for qw(nodes holds suspects);

	# the holds of the crossed keys, and the suspects of their waiters, bad
	# too, as soon as the waits show in the graph
	$sa->query_safe("BEGIN; SELECT rlock_try('h:1')");
	$sb->query_safe("BEGIN; SELECT rlock_try('h:2')");
	RlockTest::send_query($sa, "SELECT rlock_try('h:2', '20 s'); COMMIT;");
	RlockTest::waiting_in_sql($n1, 'h:2');
	my @uuids;
	RlockTest::wait_until(
		sub {
			@uuids = grep { /^[0-9a-f-]{36}:\d+$/ }
			  @{ $redis->cmd('HKEYS', 'rlock_wfg:{rlock_wfg}:nodes') };
			@uuids > 0;
		},
		10);
	for my $s (@uuids)
	{
		$redis->cmd('HSET', 'rlock_wfg:{rlock_wfg}:suspects', $s, "\x93\x01\x02\x03");
		my ($u) = $s =~ /^(.*):\d+$/;
		$redis->cmd('SET', "rlock_wfg:{rlock_wfg}:i:$u", "\x92\x01\xc0");
	}
	$redis->cmd('HSET', 'rlock_wfg:{rlock_wfg}:holds', 'h:1', "\x82\xa1u\x01\xa1v\x90");
	RlockTest::send_query($sb, "SELECT rlock_try('h:1', '20 s'); COMMIT;");
	my $v = victims($sa, $sb);
	is(scalar @$v, 1, 'bad entries in the graph: the crossed cycle still has one victim');
	RlockTest::collect($_) for ($sa, $sb);
	my $left = 0;
	for my $f (sort keys %bad)
	{
		$left++ if defined $redis->cmd('HGET', 'rlock_wfg:{rlock_wfg}:nodes', $f);
	}
	is($left, 0, 'and the bad entries of nodes are gone');
	is($n1->safe_psql('postgres', 'SELECT 1') . $n2->safe_psql('postgres', 'SELECT 1'),
		'11', 'both instances answer');
	is(RlockTest::worker_pid($n1) . ' ' . RlockTest::worker_pid($n2),
		$worker{one} . ' ' . $worker{two}, 'the same workers run');
	$redis->cmd('DEL', "rlock_wfg:{rlock_wfg}:$_") for qw(nodes holds suspects);
}

# The scripts Redis ran in 2 s, and their mean time in microseconds
# (INFO commandstats): only the searches run while every session waits.
sub search_cost
{
	$redis->cmd('CONFIG', 'RESETSTAT');
	usleep(2_000_000);
	my ($calls, $per_call) = $redis->cmd('INFO', 'commandstats') =~
	  /cmdstat_evalsha:calls=(\d+),usec=\d+,usec_per_call=([\d.]+)/;
	return ($calls // 0, $per_call // -1);
}

#---- 200 waits, no cycle: no victim, and what a search costs ----

{
	$sa->query_safe("BEGIN; SELECT rlock_try('many:1')");
	$sb->query_safe("BEGIN; SELECT rlock_try('many:2')");
	my @runs;
	for my $pair ([ $n1, 'many:2' ], [ $n2, 'many:1' ])
	{
		my ($node, $key) = @$pair;
		for (1 .. 100)
		{
			my ($out, $err) = ('', '');
			my $h = IPC::Run::start(
				[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
					"SELECT rlock_try('$key', '30 s')" ],
				'>', \$out, '2>', \$err);
			push @runs, [ $h, \$out, \$err ];
		}
	}
	ok( RlockTest::wait_until(
			sub {
				$n1->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE state = 'waiting'") == 100
				  && $n2->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE state = 'waiting'") == 100;
			},
			30),
		'100 sessions wait on each instance');
	my ($calls, $per_call) = search_cost();
	cmp_ok($calls, '>=', 20, "the searches ran: $calls in 2 s");
	note("a search with 200 waits: $per_call us a call");
	cmp_ok($per_call, '<', 10_000, 'a search with 200 waits takes less than 10 ms');
	$sa->query_safe('COMMIT');
	$sb->query_safe('COMMIT');
	my $victims = 0;
	for my $r (@runs)
	{
		$r->[0]->finish;
		$victims++ if ${ $r->[2] } =~ /deadlock/;
	}
	is($victims, 0, '200 waits without a cycle: no 40P01');
}

#---- a chain of 200 waits across the instances, no cycle ----

# session i (on one when i is even, else two) holds c:i and waits for
# c:i+1; c:200 is held by a session of one.  Each search visits the chain
# from each of its instance's waits: the cost is noted.
{
	$sa->query_safe("BEGIN; SELECT rlock_try('c:200')");
	$_->safe_psql('postgres', 'SELECT 1') for ($n1, $n2);
	my $gate1 = RlockTest::session($n1);
	my $gate2 = RlockTest::session($n2);
	$_->query_safe('SELECT pg_advisory_lock(7)') for ($gate1, $gate2);
	my @runs;
	for my $i (0 .. 199)
	{
		my $node = $i % 2 ? $n2 : $n1;
		my ($out, $err) = ('', '');
		my $next = $i + 1;
		my $h = IPC::Run::start(
			[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
				"BEGIN; SELECT rlock_try('c:$i'); SELECT pg_advisory_lock_shared(7); "
				  . "SELECT rlock_try('c:$next', '60 s'); COMMIT;" ],
			'>', \$out, '2>', \$err);
		push @runs, [ $h, \$out, \$err ];
	}
	ok( RlockTest::wait_until(
			sub {
				$n1->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE key LIKE 'c:%' AND state = 'held'") == 101
				  && $n2->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE key LIKE 'c:%' AND state = 'held'") == 100;
			},
			30),
		'a chain of 200: every link holds its key');
	$_->query_safe('SELECT pg_advisory_unlock(7)') for ($gate1, $gate2);
	ok( RlockTest::wait_until(
			sub {
				$n1->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE state = 'waiting'") == 100
				  && $n2->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE state = 'waiting'") == 100;
			},
			30),
		'and waits for the next');
	my ($calls, $per_call) = search_cost();
	note("a chain of 200 waits: $calls searches in 2 s, $per_call us a call");
	cmp_ok($per_call, '<', 20_000, 'a search through a chain of 200 takes less than 20 ms');
	$sa->query_safe('COMMIT');
	my $victims = 0;
	for my $r (@runs)
	{
		$r->[0]->finish;
		$victims++ if ${ $r->[2] } =~ /deadlock/;
	}
	is($victims, 0, 'a chain of 200 without a cycle: no 40P01');
	$_->quit for ($gate1, $gate2);
}

$_->quit for ($sa, $sb);
for my $n ($n1, $n2)
{
	unlike(slurp_file($n->logfile), qr/TRAP:|terminated by signal|server process .* was terminated/,
		'no crash in the log of ' . $n->name);
	$n->stop;
}
$redis->stop;
done_testing();
