# Replies lost after Redis ran the command.  First, one at a time: Redis
# is kept busy by DEBUG SLEEP 1 while a session takes, re-enters or
# releases a lock; the worker gives up on the connection after
# rlock.command_timeout, Redis then runs the command it had buffered (seen
# with MONITOR) and its reply goes nowhere.  The worker sends the hold
# count again on its new connection: the session gets the right answer,
# the count in Redis never drifts, a grant given up meanwhile is handed
# back, and a transaction whose re-entry lost its reply still commits.
# Then, at random moments, the worker's command connection is killed
# (CLIENT KILL ID) while four sessions take, re-enter and release their
# own locks and contend for a shared one in transactions: no statement
# fails, after every kill the counts in Redis equal those the sessions
# report and expect, and at the end no lock is left.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use RlockTest;

my $redis =
  RlockTest::Redis->start(args => [ '--enable-debug-command', 'local' ]);
# Without client tracking, so without transfers: a lock handed to the
# next local waiter by a transfer whose reply is lost with its connection
# is lost to that waiter by design (worker/transfer.c), and its commit
# fails with 40001, which the churn below would count as a failure.
my $node = RlockTest::node('lost_replies', $redis,
	connect_timeout => '3s',
	command_timeout => '300ms',
	conf => [ "rlock.watchdog_timeout = '6s'", 'log_min_messages = warning',
			  'rlock.client_tracking = off' ]);
my $worker = RlockTest::worker_pid($node);
my $mon = $redis->monitor;

my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');

# Run $sql while Redis sleeps for a second; returns its output and error
# output, and the scripts Redis ran meanwhile for $key, each as
# [client address, hold count asked for, 'acquire' or 'release'].  An
# acquire's count follows its keys, the lease and the owner; a mark for
# client-side tracking may come after it.
sub while_redis_sleeps
{
	my ($sql, $key) = @_;
	my ($out, $err, $lines) =
	  RlockTest::while_redis_sleeps($redis, $mon, $s, $sql);
	my @ran;
	for my $line (@$lines)
	{
		next unless $line =~ /^[\d.]+ \[\d+ ([\d.:]+)\] "EVALSHA" (.*)$/;
		my ($client, $args) = ($1, $2);
		my @a = $args =~ /"((?:[^"\\]|\\.)*)"/g;
		next unless $a[2] eq $key;
		push @ran,
		  $a[-1] eq 'PUBLISH'
		  ? [ $client, $a[5], 'release' ]
		  : [ $client, $a[ 4 + $a[1] ], 'acquire' ];
	}
	return ($out, $err, \@ran);
}

# Did the script for $what with count $count run on two connections: the
# one the worker gave up on, and its new one?
sub ran_twice
{
	my ($ran, $what, $count) = @_;
	my %clients = map { $_->[0] => 1 }
	  grep { $_->[2] eq $what && $_->[1] eq $count } @$ran;
	return scalar(keys %clients) == 2;
}

sub counts
{
	my ($key) = @_;
	return join(',', @{ $redis->counts($key) }) . ' / '
	  . $s->query("SELECT rlock_held('$key')");
}

# -- one lost reply at a time ------------------------------------------------

my ($out, $err, $ran) = while_redis_sleeps(
	"SET statement_timeout = '100ms'; SELECT rlock_session_try('lr:given');",
	'lr:given');
like($err, qr/57014/, 'an acquire given up while Redis sleeps');
my @acquired = grep { $_->[2] eq 'acquire' } @$ran;
my @undone = grep { $_->[2] eq 'release' && $_->[1] eq '0' } @$ran;
ok(@acquired == 1 && @undone == 1 && $acquired[0][0] ne $undone[0][0],
	'Redis ran the acquire after the worker had given up on its connection, '
	  . 'and the release that undoes it on the next one');
$s->query_safe('SET statement_timeout = 0');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'lr:given') == 0 }, 5),
	'the grant whose reply was lost is handed back');
is($s->query("SELECT rlock_held('lr:given')"), '0', 'and the session holds nothing');

($out, $err, $ran) =
  while_redis_sleeps("SELECT rlock_session_try('lr:k');", 'lr:k');
is($out, 't', 'a first acquire whose reply was lost succeeds');
is($err, '', 'without a message');
ok(ran_twice($ran, 'acquire', 1), 'Redis ran it twice, on two connections');
is(counts('lr:k'), '1 / 1', 'Redis and the session count one hold');

($out, $err, $ran) =
  while_redis_sleeps("SELECT rlock_session_try('lr:k');", 'lr:k');
is($out, 't', 'a re-entry whose reply was lost succeeds');
ok(ran_twice($ran, 'acquire', 2), 'Redis ran it twice');
is(counts('lr:k'), '2 / 2', 'the count went up by one, not two');

($out, $err, $ran) =
  while_redis_sleeps("SELECT rlock_session_release('lr:k');", 'lr:k');
is($out, 't', 'a partial release whose reply was lost succeeds');
is($err, '', 'without a warning');
ok(ran_twice($ran, 'release', 1), 'Redis ran it twice');
is(counts('lr:k'), '1 / 1', 'the count went down by one, not two');

$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('lr:x')");
($out, $err, $ran) = while_redis_sleeps("SELECT rlock_try('lr:x');", 'lr:x');
is($out, 't', 'a re-entry in a transaction whose reply was lost succeeds');
ok(ran_twice($ran, 'acquire', 2), 'Redis ran it twice');
is(counts('lr:x'), '2 / 2', 'the count is two');
$s->query('COMMIT');
is($s->{stderr}, '', 'the transaction commits: no lock was lost');
$s->{stderr} = '';
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'lr:x') == 0 }, 5),
	'and its commit releases both holds');

($out, $err, $ran) =
  while_redis_sleeps("SELECT rlock_session_release('lr:k');", 'lr:k');
ok(ran_twice($ran, 'release', 0), 'a full release whose reply was lost ran twice');
note "it returned '$out'" . ($err ne '' ? " with: $err" : '');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'lr:k') == 0 }, 5),
	'the lock is free');
is($s->query("SELECT rlock_held('lr:k')"), '0', 'and the session holds nothing');

# -- the command connection killed at random moments -------------------------

undef $mon;

my $nsessions = 4;
my (@w, @pids, @expect, @owner);
for my $i (0 .. $nsessions - 1)
{
	my $w = $node->background_psql('postgres', on_error_stop => 0);
	$w->query_safe('\set VERBOSITY verbose');
	push @pids, $w->query_safe('SELECT pg_backend_pid()');
	$w->query_safe("SELECT rlock_session_try('lk:$i')");
	push @owner, $redis->owners("lk:$i")->[0];
	push @w, $w;
	push @expect, 1;
}

# Session $i's statement for a round: a few steps on its own lock whose
# outcome the test knows, or a transaction contending for the shared lock.
sub churn
{
	my ($i) = @_;
	if (rand() < 0.3)
	{
		return "BEGIN; SELECT rlock_try('lk:shared', '5 s'); "
		  . "SELECT rlock_try('lk:shared'); COMMIT;";
	}
	my @ops;
	for (1 .. 1 + int(rand(3)))
	{
		if ($expect[$i] < 3 && ($expect[$i] == 0 || rand() < 0.5))
		{
			push @ops, "rlock_session_try('lk:$i')";
			$expect[$i]++;
		}
		else
		{
			push @ops, "rlock_session_release('lk:$i')";
			$expect[$i]--;
		}
	}
	return 'SELECT ' . join(', ', @ops) . ';';
}

# What differs between the counts expected, those the sessions report and
# those in Redis.
sub drift
{
	my @diff;
	for my $i (0 .. $nsessions - 1)
	{
		my $held = $w[$i]->query("SELECT rlock_held('lk:$i')");
		my $redis_count = $redis->cmd('HGET', "lk:$i", $owner[$i]) // 0;
		push @diff, "lk:$i: expected $expect[$i], session $held, Redis $redis_count"
		  unless $held == $expect[$i] && $redis_count == $expect[$i];
	}
	push @diff, 'lk:shared is still held' if $redis->cmd('EXISTS', 'lk:shared');
	return join('; ', @diff);
}

my ($kills, $failures, $unsure) = (0, '', 0);
my @drifted;
my @stuck;
for my $round (1 .. 15)
{
	my $id;
	RlockTest::wait_until(sub { defined($id = $redis->client_id('rlock_command')) }, 5)
	  or die 'the worker does not connect';
	RlockTest::send_query($w[$_], churn($_)) for 0 .. $nsessions - 1;
	sleep(rand(0.01));
	$kills += $redis->cmd('CLIENT', 'KILL', 'ID', $id) eq '1' ? 1 : 0;
	push @stuck, $round
	  unless RlockTest::wait_until(
		sub { RlockTest::count_active($node, @pids) == 0 }, 10);
	for my $i (0 .. $nsessions - 1)
	{
		my ($out, $err) = RlockTest::collect($w[$i]);
		$failures .= "round $round, session $i: $err" if $err =~ /ERROR/;
		$unsure++ if $err =~ /was no longer held in Redis/;
	}
	my $diff;
	push @drifted, "round $round: $diff"
	  unless RlockTest::wait_until(sub { ($diff = drift()) eq '' }, 5);
}
note "kills $kills, full releases reported as not held $unsure";
cmp_ok($kills, '>=', 10, "the command connection was killed $kills times");
is_deeply(\@stuck, [], 'every statement ended');
is($failures, '', 'none failed: the worker sent them again on a new connection');
is_deeply(\@drifted, [],
	'after every kill the counts in Redis are those the sessions report and expect');

for my $i (0 .. $nsessions - 1)
{
	$w[$i]->query('SELECT rlock_release_all()');
	$w[$i]->quit;
}
$s->quit;
ok( RlockTest::wait_until(
		sub { @{ $redis->cmd('KEYS', 'l[rk]:*') } == 0 }, 5),
	'no lock is left');
is(RlockTest::worker_pid($node), $worker, 'the same worker ran throughout');

done_testing();
