# A hot key shared by this instance's sessions and other clients: the
# worker hands a lock straight to its own next waiter only
# rlock.handoff_limit times in a row while someone else listens on the
# lock's channel; then it frees the lock for everyone and its line holds
# back briefly.  Without that bound another client never wins: the next
# local try leaves right behind each release.
#
# - 8 Redisson threads (tryLock 10 s, a JDBC transaction, unlock) and 8
#   SQL sessions (rlock_try 5 s in a transaction) on one key for 15 s: no
#   tryLock and no rlock_try gives up, Redisson gets its share, no two
#   sections overlap and the counter is exact;
# - the same with the bound switched off (0): Redisson's share collapses,
#   which is what the bound is for;
# - two PostgreSQL instances with 8 sessions each on one key: both get
#   their share, no session gives up, no overlap;
# - both instances and the Redisson threads on one key: no overlap, every
#   counter exact, nobody gives up, Redisson gets its turns (a freed lock
#   is left to clients other than rlock for a moment: the yield).
# Local hand-offs go as transfers (worker/transfer.c) where tracking
# vouches for the holder: each case checks that Redis ran some.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();
use RlockTest;
use RlockTest::Redis;
use RlockTest::Redisson;
use RlockTest::TLS;

plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my @conf = ("listen_addresses = '127.0.0.1'", 'max_connections = 40');
my $one = RlockTest::node('a', $redis, conf => \@conf);
my $two = RlockTest::node('b', $redis, conf => \@conf);
my $dir = PostgreSQL::Test::Utils::tempdir();

for my $node ($one, $two)
{
	$node->safe_psql('postgres', q{
		CREATE TABLE counters (k text PRIMARY KEY, n bigint NOT NULL);
		CREATE TABLE spans (k text, s timestamptz, e timestamptz,
							who text DEFAULT 'java');
		CREATE TABLE misses (who text);
	});
}

# pgbench on $node: $clients sessions for $seconds, each transaction
# rlock_try($key, '5 s') and, when granted, a section on the counter row;
# a try that gives up is a row of misses.  Returns the harness.
sub sql_load
{
	my ($node, $key, $clients, $seconds) = @_;
	my $name = $node->name;
	my $script = "$dir/$name-$key.sql";
	$node->safe_psql('postgres',
		"INSERT INTO counters VALUES ('$key', 0) ON CONFLICT DO NOTHING");
	open(my $fh, '>', $script) or die "$script: $!";
	print $fh <<"EOF";
BEGIN;
SELECT rlock_try('$key', '5 s')::int AS got \\gset
\\if :got
SELECT n, extract(epoch FROM clock_timestamp()) AS s FROM counters WHERE k = '$key' \\gset
UPDATE counters SET n = :n + 1 WHERE k = '$key';
INSERT INTO spans VALUES ('$key', to_timestamp(:s), clock_timestamp(), '$name');
\\else
INSERT INTO misses VALUES ('$name');
\\endif
COMMIT;
EOF
	close $fh;
	my $out = '';
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-c', $clients, '-j', '2', '-T', $seconds,
		  '-f', $script, '-h', $node->host, '-p', $node->port, 'postgres' ],
		'<', \undef, '>&', \$out);
	return { h => $h, out => \$out };
}

sub sql_finish
{
	my ($run) = @_;
	$run->{h}->finish;
	diag(${ $run->{out} }) if $? != 0;
	return $? == 0;
}

# sections on $key per who (an instance's name, or java), the misses per
# instance, and the overlaps among the sections of all instances
sub tally
{
	my ($key, @nodes) = @_;
	my (%sections, %misses, @spans);
	for my $node (@nodes)
	{
		for (split /\n/, $node->safe_psql('postgres',
				"SELECT who, extract(epoch FROM s), extract(epoch FROM e) FROM spans WHERE k = '$key'"))
		{
			my @f = split /\|/;
			$sections{ $f[0] }++;
			push @spans, \@f;
		}
		$misses{ $node->name } = $node->safe_psql('postgres',
			"SELECT count(*) FROM misses WHERE who = '" . $node->name . "'");
		$node->safe_psql('postgres', 'TRUNCATE misses');
	}
	my @sorted = sort { $a->[1] <=> $b->[1] } @spans;
	my $overlaps = grep { $sorted[$_][1] < $sorted[ $_ - 1 ][2] } 1 .. $#sorted;
	return (\%sections, \%misses, $overlaps, scalar @spans);
}

sub set_limit
{
	my ($node, $limit) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET rlock.handoff_limit = $limit; SELECT pg_reload_conf()");
	RlockTest::wait_until(sub {
		$node->safe_psql('postgres', 'SHOW rlock.handoff_limit') eq $limit
	}, 10) or die "rlock.handoff_limit did not become $limit";
}

# Transfers Redis ran so far: the transfer script is the only one, of
# rlock's and of Redisson's lock, that calls PUBSUB NUMSUB
sub transfers
{
	my ($calls) = $redis->cmd('INFO', 'commandstats') =~ /cmdstat_pubsub\|numsub:calls=(\d+)/;
	return $calls // 0;
}

my $jdbc = 'jdbc:postgresql://127.0.0.1:' . $one->port . '/postgres?user='
  . getpwuid($<);
my $java = RlockTest::Redisson->start($redis, jdbc => $jdbc);

#---- 8 Redisson threads and 8 SQL sessions, 15 s ----

my %share;
for my $case ([ 'bounded', 4, 15 ], [ 'unbounded', 0, 8 ])
{
	my ($what, $limit, $seconds) = @$case;
	my $key = "fair:$what";
	set_limit($one, $limit);
	$one->safe_psql('postgres', "INSERT INTO counters VALUES ('$key', 0)");
	my $before = transfers();
	my $id = $java->send('j', 'contend', $key, 8, $seconds, 10000);
	my $sql = sql_load($one, $key, 8, $seconds);
	ok(sql_finish($sql), "[$what] pgbench ran");
	my $moved = transfers() - $before;
	cmp_ok($moved, '>', 0, "[$what] hand-offs went as transfers ($moved)");
	my $r = $java->result($id, $seconds + 60);
	ok($r && $r->{ok}, "[$what] the Redisson threads ran")
	  or diag($r ? $r->{message} : 'no answer');
	my ($jsections, $jtimeouts, $jlongest) = split / /, ($r->{value} // '0 0 0');
	my ($sections, $misses, $overlaps, $total) = tally($key, $one);
	is($sections->{java} // 0, $jsections,
		"[$what] every Redisson section is a row");
	is($one->safe_psql('postgres', "SELECT n FROM counters WHERE k = '$key'"),
		$total, "[$what] the counter is exact: $total");
	is($overlaps, 0, "[$what] no two sections overlapped");
	$share{$what} = $total ? $jsections / $total : 0;
	diag(sprintf('[%s] handoff_limit %d: SQL %d, Redisson %d (%.1f %%), '
		  . 'Redisson tryLock timeouts %d, longest tryLock %d ms, SQL misses %d',
		  $what, $limit, $sections->{a} // 0, $jsections, 100 * $share{$what},
		  $jtimeouts, $jlongest, $misses->{a}));
	if ($limit > 0)
	{
		is($jtimeouts, 0, "[$what] no Redisson tryLock(10 s) gave up");
		is($misses->{a}, 0, "[$what] no rlock_try(5 s) gave up");
		# with a local line always waiting, each run of $limit hand-offs
		# ends with the lock freed for all; Redisson wins at least a good
		# part of those turns
		cmp_ok($share{$what}, '>=', 0.25 / ($limit + 1),
			"[$what] Redisson took at least a quarter of its turns");
		cmp_ok($sections->{a} // 0, '>', $jsections / 4,
			"[$what] the SQL sessions were not starved either");
	}
}
cmp_ok($share{unbounded}, '<', $share{bounded} / 2,
	'without the bound Redisson gets far less: the bound is what lets it in');
set_limit($one, 4);

#---- two instances, 8 sessions each, 12 s ----

my $key = 'fair:instances';
my $before = transfers();
my @runs = map { sql_load($_, $key, 8, 12) } ($one, $two);
ok(sql_finish($_), 'pgbench ran on ' . ($_ == $runs[0] ? 'a' : 'b')) for @runs;
my ($sections, $misses, $overlaps, $total) = tally($key, $one, $two);
diag(sprintf('two instances: a %d, b %d sections; misses a %d, b %d',
	$sections->{a} // 0, $sections->{b} // 0, $misses->{a}, $misses->{b}));
is($overlaps, 0, 'two instances: no two sections overlapped');
is($misses->{a} + $misses->{b}, 0, 'two instances: no rlock_try(5 s) gave up');
for my $name ('a', 'b')
{
	cmp_ok($sections->{$name} // 0, '>=', $total / 5,
		"two instances: $name took at least a fifth of the sections");
}
cmp_ok(transfers() - $before, '>', 0, 'two instances: some hand-offs were transfers');

#---- two instances and Redisson, 12 s ----

$key = 'fair:mixed';
$one->safe_psql('postgres', "INSERT INTO counters VALUES ('$key', 0)");
$before = transfers();
my $id = $java->send('j', 'contend', $key, 8, 12, 10000);
@runs = map { sql_load($_, $key, 8, 12) } ($one, $two);
ok(sql_finish($_), 'with Redisson: pgbench ran on ' . ($_ == $runs[0] ? 'a' : 'b'))
  for @runs;
my $r = $java->result($id, 72);
ok($r && $r->{ok}, 'with Redisson: the Redisson threads ran')
  or diag($r ? $r->{message} : 'no answer');
my ($jsections, $jtimeouts) = split / /, ($r->{value} // '0 0 0');
my $moved = transfers() - $before;
($sections, $misses, $overlaps, $total) = tally($key, $one, $two);
diag(sprintf('with Redisson: a %d, b %d, Redisson %d sections; %d transfers; '
	  . 'misses a %d, b %d; Redisson timeouts %d',
	$sections->{a} // 0, $sections->{b} // 0, $jsections, $moved,
	$misses->{a}, $misses->{b}, $jtimeouts));
is($overlaps, 0, 'with Redisson: no two sections overlapped');
is($sections->{java} // 0, $jsections, 'with Redisson: every Redisson section is a row');
is($one->safe_psql('postgres', "SELECT n FROM counters WHERE k = '$key'"),
	($sections->{a} // 0) + $jsections, 'with Redisson: the counter of a is exact');
is($two->safe_psql('postgres', "SELECT n FROM counters WHERE k = '$key'"),
	$sections->{b} // 0, 'with Redisson: the counter of b is exact');
is($misses->{a} + $misses->{b}, 0, 'with Redisson: no rlock_try(5 s) gave up');
cmp_ok($moved, '>', 0, 'with Redisson: some hand-offs were transfers');
# each instance's line holds back for others after its run, and the
# lock it frees is marked yielded for a millisecond, so that the other
# instance's line, woken by the same unlock message and quicker than
# Redisson, leaves it to Redisson
is($jtimeouts, 0, 'with Redisson: no tryLock(10 s) gave up');
cmp_ok($jsections, '>=', $total / 20,
	'with Redisson: Redisson took a twentieth of the sections at least');

$java->stop;
$_->stop for ($one, $two);
$redis->stop;
done_testing();
