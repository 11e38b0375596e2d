#!/usr/bin/perl
#
# Measurements for test/bench/run-bench that pgbench and redis-benchmark
# cannot make themselves.  Each subcommand prints one line of numbers.
#
#   latency FILE...                 pgbench per-transaction logs:
#                                   "count mean_ms p99_ms max_ms"
#   spin REDIS_PORT CLIENTS SECONDS PG_HOST PG_PORT
#                                   the spin-lock baseline on one key (SET NX,
#                                   100 ms sleep when busy), guarding the
#                                   same transaction as the hot-key runs:
#                                   "acquisitions_per_s handoff_p50_ms
#                                   handoff_p99_ms latency_mean_ms
#                                   latency_p99_ms latency_max_ms"
#                                   (latency: from the first try to the
#                                   release)
#   handoff PSQL...                 hand-off gaps recorded by the hot-key
#                                   scripts in table handoff: "p50_ms p99_ms"
#   wakeup REDIS_PORT N PSQL...     from an unlock published by another
#                                   client to rlock_lock returning in the
#                                   waiting statement (clock_timestamp(),
#                                   same host clock): "p50_ms p99_ms"
#
# PSQL... is the psql command line that reaches the benchmark database.

use strict;
use warnings;

use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use IPC::Run qw(start finish timeout);
use POSIX ();
use Time::HiRes qw(time sleep);

use lib dirname(__FILE__) . '/../perl';
use RlockTest::Resp;

my $cmd = shift @ARGV // die "usage: measure.pl latency|sha|spin|handoff|wakeup ...\n";

# Percentile of a sorted list, nearest rank
sub pct
{
	my ($p, $sorted) = @_;
	return 0 unless @$sorted;
	my $i = int($p * @$sorted + 0.999999) - 1;
	$i = 0 if $i < 0;
	$i = $#$sorted if $i > $#$sorted;
	return $sorted->[$i];
}

sub ms { return sprintf('%.3f', $_[0] * 1000) }

if ($cmd eq 'latency')
{
	my @lat;
	for my $file (@ARGV)
	{
		open(my $fh, '<', $file) or die "$file: $!";
		while (<$fh>)
		{
			my @f = split;
			push @lat, $f[2] / 1e6 if @f >= 3;
		}
	}
	@lat = sort { $a <=> $b } @lat;
	my $sum = 0;
	$sum += $_ for @lat;
	printf "%d %s %s %s\n", scalar @lat, ms(@lat ? $sum / @lat : 0),
	  ms(pct(0.99, \@lat)), ms(@lat ? $lat[-1] : 0);
}
elsif ($cmd eq 'spin')
{
	my ($port, $clients, $seconds, $pghost, $pgport) = @ARGV;
	my $dir = tempdir(CLEANUP => 1);
	require DBI;
	my $start = time + 0.5;
	my $end = $start + $seconds;
	my @kids;
	for my $id (1 .. $clients)
	{
		my $pid = fork() // die "fork: $!";
		if ($pid == 0)
		{
			my $r = RlockTest::Resp->connect($port);
			my $db = DBI->connect("dbi:Pg:host=$pghost;port=$pgport;dbname=postgres",
				'postgres', '', { AutoCommit => 1, RaiseError => 1 });
			my $insert = $db->prepare(
				'INSERT INTO handoff VALUES (clock_timestamp(), clock_timestamp())');
			my @rec;
			sleep($start - time) if $start > time;
			my $first;
			while (time < $end)
			{
				$first //= time;
				my $ok = $r->call('SET', 'bench:spin', "client:$id", 'NX', 'PX', 30000);
				if (defined $ok && !ref $ok && $ok eq 'OK')
				{
					my $got = time;
					$db->begin_work;
					$insert->execute;
					$db->commit;
					# release only if still ours, as careful clients do
					$r->call('EVAL',
						"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
						1, 'bench:spin', "client:$id");
					push @rec, sprintf("%.6f %.6f %.6f", $got, time, $first);
					undef $first;
				}
				else
				{
					sleep(0.1);
				}
			}
			$db->disconnect;
			# one file per client: no interleaved lines
			open(my $out, '>', "$dir/$id") or POSIX::_exit(1);
			print $out "$_\n" for @rec;
			close $out;
			POSIX::_exit(0);
		}
		push @kids, $pid;
	}
	waitpid($_, 0) for @kids;
	my @rec;
	for my $id (1 .. $clients)
	{
		open(my $fh, '<', "$dir/$id") or die "client $id left no record\n";
		push @rec, map { [split] } <$fh>;
	}
	@rec = sort { $a->[0] <=> $b->[0] } @rec;
	my @gaps;
	for my $i (1 .. $#rec)
	{
		push @gaps, $rec[$i][0] - $rec[ $i - 1 ][1];
	}
	@gaps = sort { $a <=> $b } @gaps;
	my @lat = sort { $a <=> $b } map { $_->[1] - $_->[2] } @rec;
	my $sum = 0;
	$sum += $_ for @lat;
	printf "%.1f %s %s %s %s %s\n", @rec / $seconds, ms(pct(0.5, \@gaps)),
	  ms(pct(0.99, \@gaps)), ms(@lat ? $sum / @lat : 0), ms(pct(0.99, \@lat)),
	  ms(@lat ? $lat[-1] : 0);
}
elsif ($cmd eq 'handoff')
{
	my @psql = @ARGV;
	my $out = '';
	my $sql = q{
		SELECT extract(epoch FROM acquired - lag(done) OVER (ORDER BY acquired))
		FROM handoff};
	IPC::Run::run([ @psql, '-c', $sql ], '>', \$out)
	  or die "psql failed\n";
	my @gaps = sort { $a <=> $b } grep { /\d/ } split /\n/, $out;
	printf "%s %s\n", ms(pct(0.5, \@gaps)), ms(pct(0.99, \@gaps));
}
elsif ($cmd eq 'wakeup')
{
	my ($port, $n, @psql) = @ARGV;
	my $r = RlockTest::Resp->connect($port);
	my $channel = 'redisson_lock__channel:{bench:wake}';
	my $waiting_sql =
	  "SELECT count(*) FROM rlock_locks WHERE key = 'bench:wake' AND state = 'waiting'";
	my @lat;

	for my $i (1 .. $n)
	{
		# the other client takes the lock as Redisson does, once free (the
		# previous waiter's release goes out after its commit)
		my $free_by = time + 10;
		until ($r->call('EVAL',
				"if redis.call('exists', KEYS[1]) == 0 then "
				  . "redis.call('hset', KEYS[1], ARGV[1], 1) "
				  . "redis.call('pexpire', KEYS[1], 60000) return 1 end return 0",
				1, 'bench:wake', 'other-client:1'))
		{
			die "the previous waiter never released the lock\n" if time > $free_by;
			sleep(0.001);
		}

		# the waiter notes the time rlock_lock returned
		my ($out, $err) = ('', '');
		my $h = start(
			[
				@psql, '-c',
				"SELECT rlock_lock('bench:wake'), extract(epoch FROM clock_timestamp())"
			],
			'<', \undef, '>', \$out, '2>', \$err, timeout(30));

		# until the statement waits (found the lock busy) and its channel
		# is subscribed
		my $deadline = time + 10;
		while (1)
		{
			my $state = '';
			if ($h->pumpable)
			{
				$h->pump_nb;
			}
			else
			{
				$h->finish;
				die "the waiter ended before the unlock: $out$err\n";
			}
			IPC::Run::run([ @psql, '-c', $waiting_sql ], '>', \$state);
			chomp $state;
			last if $state eq '1'
			  && $r->call('PUBSUB', 'NUMSUB', $channel)->[1] >= 1;
			if (time > $deadline)
			{
				eval { $h->kill_kill };
				die "the waiter never waited (waiting: '$state', subscribers: "
				  . $r->call('PUBSUB', 'NUMSUB', $channel)->[1]
				  . "): $out$err\n";
			}
			sleep(0.005);
		}

		my $t0 = time;
		$r->call('EVAL',
			"redis.call('del', KEYS[1]) return redis.call('publish', KEYS[2], '0')",
			2, 'bench:wake', $channel);
		finish($h) or die "the waiter failed: $err\n";
		$out =~ /^\|([0-9.]+)$/m or die "unexpected output from the waiter: $out\n";
		push @lat, $1 - $t0;
	}
	@lat = sort { $a <=> $b } @lat;
	printf "%s %s\n", ms(pct(0.5, \@lat)), ms(pct(0.99, \@lat));
}
else
{
	die "unknown subcommand $cmd\n";
}
