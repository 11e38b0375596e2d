# Redis stalled while four sessions take, re-enter and release locks: by
# CLIENT PAUSE (Redis holds the commands back, and drops those of a
# connection closed meanwhile) and by SIGSTOP (the commands run when it
# resumes, their replies going nowhere), mostly for longer than
# rlock.command_timeout, sometimes for less, with some statements giving
# up before the worker does (statement_timeout).  Every statement ends in
# bounded time, normally or with 58030 (or its own timeout); replies that
# come late or never change nothing: after each stall the hold count of
# every lock in Redis equals what its session reports (rlock_held), no
# hold is reported lost, and at the end nothing is left in Redis.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('stalled', $redis,
	connect_timeout => '600ms',
	command_timeout => '400ms',
	conf => ["rlock.watchdog_timeout = '6s'"]);
my $worker = RlockTest::worker_pid($node);
my $nsessions = 4;
my $long_ms = 1200;
my $short_ms = 250;
# the longest a statement may take: the stall, then connect + command
# timeout, and a margin
my $bound = $long_ms / 1000 + 0.6 + 0.4 + 1.5;

my (@s, @pids, @owner, @held, @shared);
for my $i (0 .. $nsessions - 1)
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	push @pids, $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe("SELECT rlock_session_try('st:$i')");
	push @owner, $redis->owners("st:$i")->[0];
	push @s, $s;
	push @held, 1;
	push @shared, 0;
}

# The statement session $i runs in this round: one step on its own lock
# (take or re-enter, or release one hold) and maybe one on the shared lock.
sub statement
{
	my ($i) = @_;
	my @ops;
	my $take = $held[$i] == 0 || ($held[$i] < 3 && rand() < 0.5);
	push @ops,
	  $take
	  ? "rlock_session_try('st:$i')"
	  : "rlock_session_release('st:$i')";
	if ($shared[$i])
	{
		push @ops, "rlock_session_release('st:shared')";
	}
	elsif (rand() < 0.5)
	{
		push @ops, "rlock_session_try('st:shared')";
	}
	my $timeout = rand() < 0.3 ? '150ms' : '0';
	return "SET statement_timeout = '$timeout'; SELECT "
	  . join(', ', @ops) . ';';
}

my $lost_reported = '';

sub hget0
{
	my ($key, $owner) = @_;
	return $redis->cmd('HGET', $key, $owner) // 0;
}

# Do Redis and every session agree on every hold count?  Updates @held
# and @shared from the sessions.  Returns a description of what differs.
sub disagreement
{
	my @diff;
	for my $i (0 .. $nsessions - 1)
	{
		my $out = $s[$i]->query("SELECT rlock_held('st:$i'), rlock_held('st:shared')");
		($held[$i], $shared[$i]) = split /\|/, $out;
		$lost_reported .= $s[$i]->{stderr} if $s[$i]->{stderr} =~ /was lost/;
		$s[$i]->{stderr} = '';
		push @diff, "st:$i: session $held[$i], Redis " . hget0("st:$i", $owner[$i])
		  if hget0("st:$i", $owner[$i]) != $held[$i];
		push @diff, "st:shared of $i: session $shared[$i], Redis "
		  . hget0('st:shared', $owner[$i])
		  if hget0('st:shared', $owner[$i]) != $shared[$i];
	}
	my @fields = @{ $redis->owners('st:shared') };
	push @diff, "st:shared has several owners: @fields" if @fields > 1;
	return join('; ', @diff);
}

my %seen = (ok => 0, '58030' => 0, timeout => 0, other => 0, unsure => 0);
my @unbounded;
my @disagreed;
for my $round (1 .. 16)
{
	my $freeze = $round % 2;
	my $ms = $round % 3 ? $long_ms : $short_ms;
	my $stall_first = rand() < 0.5;
	RlockTest::wait_for_redis($node, 5)
	  or die "round $round: Redis does not serve requests";

	my $stall = sub {
		if ($freeze)
		{
			$redis->freeze;
			sleep($ms / 1000);
			$redis->thaw;
		}
		else
		{
			# it ends by itself: CLIENT UNPAUSE would wait for it too
			$redis->cmd('CLIENT', 'PAUSE', $ms, 'ALL');
		}
	};
	my @sql = map { statement($_) } 0 .. $nsessions - 1;
	if ($stall_first && $freeze)
	{
		$redis->freeze;
		RlockTest::send_query($s[$_], $sql[$_]) for 0 .. $nsessions - 1;
		sleep($ms / 1000);
		$redis->thaw;
	}
	elsif ($stall_first)
	{
		$stall->();
		RlockTest::send_query($s[$_], $sql[$_]) for 0 .. $nsessions - 1;
	}
	else
	{
		RlockTest::send_query($s[$_], $sql[$_]) for 0 .. $nsessions - 1;
		sleep(rand(0.005));
		$stall->();
	}
	push @unbounded, $round
	  unless RlockTest::wait_until(
		sub { RlockTest::count_active($node, @pids) == 0 }, $bound);

	for my $i (0 .. $nsessions - 1)
	{
		my ($out, $err) = RlockTest::collect($s[$i]);
		if ($err =~ /ERROR:  58030/)
		{
			$seen{'58030'}++;
		}
		elsif ($err =~ /ERROR:  57014: canceling statement due to statement timeout/)
		{
			$seen{timeout}++;
		}
		elsif ($err =~ /ERROR/)
		{
			$seen{other}++;
			diag("round $round, session $i: $err");
		}
		else
		{
			$seen{ok}++;
		}
		# a full release whose reply was lost cannot tell whether the lock
		# was there: it may say it was not
		$seen{unsure}++ if $err =~ /was no longer held in Redis/;
		$lost_reported .= $err if $err =~ /was lost/;
	}
	$s[$_]->query_safe("SET statement_timeout = 0") for 0 .. $nsessions - 1;

	my $diff;
	push @disagreed, "round $round: $diff"
	  unless RlockTest::wait_until(sub { ($diff = disagreement()) eq '' },
		10);
	note "round $round ("
	  . ($freeze ? 'SIGSTOP' : 'CLIENT PAUSE')
	  . " $ms ms, " . ($stall_first ? 'before' : 'after')
	  . " the statements): held @held, shared @shared";
}

note join(', ', map { "$_ $seen{$_}" } sort keys %seen);
is_deeply(\@unbounded, [], "every statement ended within $bound s of its stall");
cmp_ok($seen{'58030'}, '>', 0,
	"statements caught by a long stall failed with 58030 ($seen{'58030'})");
cmp_ok($seen{ok}, '>', 0, "others went through ($seen{ok})");
is($seen{other}, 0, 'no statement failed in any other way');
is_deeply(\@disagreed, [],
	'after every stall Redis and the sessions agree on every hold count');
is($lost_reported, '', 'no hold was reported lost');

for my $i (0 .. $nsessions - 1)
{
	$s[$i]->query("SELECT rlock_release_all()");
	$s[$i]->quit;
}
ok(RlockTest::wait_until(sub { @{ $redis->cmd('KEYS', 'st:*') } == 0 }, 5),
	'nothing is left in Redis once the sessions release everything');
is(RlockTest::worker_pid($node), $worker, 'the same worker ran throughout');

done_testing();
