# Redisson and rlock on the same Sentinels, under a mixed load across a
# failover: Java threads (Redisson with useSentinelServers, test/interop's
# SentinelLoad) and SQL sessions (pgbench) take one lock over and over and
# write each critical section to one table.  Redisson looks for a new
# primary only when it next asks the Sentinels (every scanInterval),
# rlock as soon as a Sentinel names one; meanwhile each side may lock on
# a different primary.
#
# - Redisson (each version of RlockTest::Redisson), Redis and rlock left
#   at their defaults, SENTINEL FAILOVER: what happened is printed;
# - a Redisson that asks the Sentinels only every 20 s, Redis left as it
#   is: Java sections on the old primary overlap SQL sections on the new
#   one, and the fencing tokens of the two primaries repeat each other;
# - the same with min-replicas-to-write 1 on every data node
#   (doc/deployments.md's recommendation): no two sections overlap, the
#   old primary refuses Redisson's writes once its last replica left;
# - the same setting, Redisson's defaults, the primary killed: no two
#   sections whose lock held to their end overlap (a Redisson lock that
#   the dying primary had not copied is lost with it, and counted apart).
#
# Sections that overlap are counted by pair: every Java section that ran
# (Redisson has no check before the data is written), and the SQL
# sections that committed (a lock lost before COMMIT fails it with 40001,
# so that section's writes never happened; those are counted apart).
#
# Both sides lock with an explicit lease (SQL 1 s, Java 3 s): a hold that
# the new primary had copied before it left the old one then bars the
# other side for that long at most, not for the watchdog's 30 s.
use strict;
use warnings;

use File::Temp ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redisson;
use RlockTest::Sentinel;

plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

# how long each side loads the lock, in seconds; the failover is asked for
# once each side has 20 sections (within half of it)
my $LOAD = 8;

mkdir "$PostgreSQL::Test::Utils::tmp_check/redis";
my $dep = RlockTest::Sentinel->start(
	dir => "$PostgreSQL::Test::Utils::tmp_check/redis",
	data_password => 'datapw',
	down_after_ms => 1000,
	failover_timeout_ms => 4000,
	args => [ '--repl-diskless-sync-delay', '0' ]);
my $node = RlockTest::node('window', $dep->data_nodes->[0],
	conf => [
		"listen_addresses = '127.0.0.1'",
		"rlock.topology = 'sentinel'",
		"rlock.nodes = '" . $dep->nodes_setting . "'",
		"rlock.sentinel_master = 'main'",
		"rlock.password_file = '"
		  . RlockTest::password_file(File::Temp::tempdir(CLEANUP => 1), 'datapw') . "'" ]);
ok(RlockTest::wait_for_redis($node, 15), 'rlock finds the primary');
my $jdbc = 'jdbc:postgresql://127.0.0.1:' . $node->port . '/postgres?user='
  . getpwuid($<);
my $dir = File::Temp::tempdir(CLEANUP => 1);

sub sql { return $node->safe_psql('postgres', $_[0]) }

# The SQL side: a section is a row of "sections" when its transaction
# commits, and a log line "rlock-window <s> <e> <port> <token>" in any
# case.  port: the primary rlock used when it granted the lock.  A lock
# call that fails is a log line "rlock-window-error <SQLSTATE>".
sql(q{
	CREATE TABLE sections (who text, s float8, e float8, port int,
						   token bigint, kept boolean);
	CREATE FUNCTION window_try(k text, fenced boolean,
							   OUT got boolean, OUT tok bigint, OUT port int)
	LANGUAGE plpgsql AS $$
	BEGIN
		IF fenced THEN
			tok := rlock_try_token(k, '1 s', '1 s');
			got := tok IS NOT NULL;
		ELSE
			got := rlock_try(k, '1 s', '1 s');
			tok := 0;
		END IF;
		SELECT split_part(redis_address, ':', 2)::int INTO port
		FROM rlock_status() WHERE command_connection = 'ready';
		port := coalesce(port, 0);
	EXCEPTION WHEN OTHERS THEN
		got := false;
		RAISE LOG 'rlock-window-error %', SQLSTATE;
	END $$;
	CREATE FUNCTION window_span(s float8, port int, tok bigint)
	RETURNS void LANGUAGE plpgsql AS $$
	DECLARE
		e float8 := extract(epoch FROM clock_timestamp());
	BEGIN
		INSERT INTO sections VALUES ('sql', s, e, port, tok, true);
		RAISE LOG 'rlock-window % % % %', s, e, port, tok;
	END $$;
});

# min-replicas-to-write $n on every data node that runs
sub min_replicas
{
	my ($n) = @_;
	for my $redis (grep { $_->pid } @{ $dep->data_nodes })
	{
		my @set = ('CONFIG', 'SET', 'min-replicas-to-write', $n);
		# the Sentinels close normal clients of a node they reconfigure
		# (CLIENT KILL TYPE normal): our connection may be one of them
		eval { $redis->cmd(@set) } // $redis->cmd(@set);
	}
}

# Overlapping sections of @$spans ({who, s, e, port, token}), by pair:
# returns the count per pair of sides ("java/sql" ...), per place of a
# Java and an SQL section ("java old, sql new" ...), and when the first
# and last overlapping section began.
sub overlaps
{
	my ($spans, $old, $new) = @_;
	my $where = sub {
		my ($x) = @_;
		return $x->{port} == $old ? 'old' : $x->{port} == $new ? 'new' : 'unknown';
	};
	my (@open, %n, $first, $last);
	for my $x (sort { $a->{s} <=> $b->{s} } @$spans)
	{
		@open = grep { $_->{e} > $x->{s} } @open;
		for my $y (@open)
		{
			$n{ join('/', sort ($x->{who}, $y->{who})) }++;
			$n{total}++;
			if ($x->{who} ne $y->{who})
			{
				my ($j, $q) = $x->{who} eq 'java' ? ($x, $y) : ($y, $x);
				$n{ 'java ' . $where->($j) . ', sql ' . $where->($q) }++;
			}
			$first //= $x->{s};
			$last = $x->{s};
		}
		push @open, $x;
	}
	return (\%n, $first, $last);
}

# The fencing tokens of @$spans: how many were given to a Java and an SQL
# section both, and how many sections got a lower token than a section
# that had ended before they began.
sub token_facts
{
	my ($spans) = @_;
	my (%sides, $twice, $lower, $highest_ended);
	my @by_start = sort { $a->{s} <=> $b->{s} } grep { $_->{token} } @$spans;
	my @by_end = sort { $a->{e} <=> $b->{e} } @by_start;
	$sides{ $_->{token} }{ $_->{who} } = 1 for @by_start;
	$twice = grep { keys %{ $sides{$_} } > 1 } keys %sides;
	$lower = 0;
	for my $x (@by_start)
	{
		while (@by_end && $by_end[0]{e} <= $x->{s})
		{
			my $t = (shift @by_end)->{token};
			$highest_ended = $t if !defined $highest_ended || $t > $highest_ended;
		}
		$lower++ if defined $highest_ended && $x->{token} < $highest_ended;
	}
	return ($twice, $lower);
}

# One mixed load across a failover.  Options: how ('failover': SENTINEL
# FAILOVER, or 'kill': SIGKILL), java (options of start_sentinel_load),
# fenced, min_replicas (0).  Returns a summary: old and new primary, the
# Java driver's answer, the SQL sections that ran and committed, the
# Java sections whose lock was gone by their unlock (lost), the overlaps
# (see above) of Java sections that ran and SQL sections that committed
# (n), of those without the lost Java sections (n_kept), and of every
# section that ran (n_ran), and the tokens.  The deployment is ready for the next load when it returns: the
# old primary converted, or restarted as a replica.
sub mixed_failover
{
	my ($label, %o) = @_;
	min_replicas($o{min_replicas} // 0);
	my $java = RlockTest::Redisson->start_sentinel_load($dep, $jdbc,
		data_password => 'datapw', lease => 3000,
		fenced => $o{fenced}, %{ $o{java} // {} });
	sql('TRUNCATE sections');
	my $key = "window:$label";
	$key =~ s/\W+/_/g;
	my $script = "$dir/$key.sql";
	my $fenced = $o{fenced} ? 'true' : 'false';
	open(my $fh, '>', $script) or die "$script: $!";
	print $fh "BEGIN;\n"
	  . "SELECT got, tok, port FROM window_try('$key', $fenced) \\gset\n"
	  . "\\if :got\n"
	  . "SELECT extract(epoch FROM clock_timestamp()) AS s \\gset\n"
	  . "SELECT pg_sleep(0.002);\n"
	  . "SELECT window_span(:s, :port, :tok);\n"
	  . "\\endif\n"
	  . "COMMIT;\n"
	  . "\\sleep 5 ms\n";
	close $fh;
	my $log_from = -s $node->logfile;
	my $run = $java->send('load', 'run', $key, 4, $LOAD * 1000);
	my $out = '';
	my $pgbench_for = sub {
		my ($seconds, $to) = @_;
		return ([ 'pgbench', '-n', '-c', 2, '-j', 1, '-T', $seconds, '-f', $script,
				  '-h', $node->host, '-p', $node->port, 'postgres' ],
			'<', \undef, '>&', $to);
	};
	my $pgbench = IPC::Run::start($pgbench_for->($LOAD, \$out));
	my $ready = RlockTest::wait_until(
		sub {
			sql("SELECT count(*) FILTER (WHERE who = 'java') >= 20
					AND count(*) FILTER (WHERE who = 'sql') >= 20
				 FROM sections") eq 't';
		},
		$LOAD / 2);

	my $old = $dep->primary;
	my $asked = time;
	my $new = ($o{how} // 'failover') eq 'kill'
	  ? $dep->kill_primary(timeout => 30)
	  : $dep->failover(timeout => 30);
	$pgbench->finish;
	# A slow vote can take longer than what was left of the load: then
	# the SQL side goes on in short runs until one of its sections
	# committed on the new primary, or for 30 s.
	my $more_until = time + 30;
	while (time < $more_until
		&& sql("SELECT count(*) FROM sections
				WHERE who = 'sql' AND port = " . $new->port) == 0)
	{
		my $more = '';
		IPC::Run::run($pgbench_for->(2, \$more));
		$out .= $more;
	}
	my $answer = $java->result($run, 60);
	$java->stop;

	my (@data, @ran, @kept);
	for (split /\n/,
		sql('SELECT who, s, e, port, coalesce(token, 0), kept FROM sections'))
	{
		my %x;
		@x{qw(who s e port token kept)} = split /\|/;
		push @data, \%x;
		push @kept, \%x if $x{kept} eq 't';
		push @ran, \%x if $x{who} eq 'java';
	}
	my $log = slurp_file($node->logfile, $log_from);
	push @ran, { who => 'sql', s => $1, e => $2, port => $3, token => $4 }
	  while $log =~ /rlock-window (\S+) (\S+) (\S+) (\S+)$/mg;
	my %errors;
	$errors{$1}++ while $log =~ /rlock-window-error (\S+)$/mg;
	my ($n, $first, $last) = overlaps(\@data, $old->port, $new->port);
	my ($n_ran) = overlaps(\@ran, $old->port, $new->port);
	my ($n_kept) = overlaps(\@kept, $old->port, $new->port);
	my %r = (
		old => $old, new => $new,
		java => $answer ? $answer->{value} // '' : 'no answer',
		sql_ran => scalar(grep { $_->{who} eq 'sql' } @ran),
		sql_committed => scalar(grep { $_->{who} eq 'sql' } @data),
		aborted => scalar(() = $out =~ /client \d+ aborted/g),
		ready => $ready,
		on_new => scalar(grep { $_->{port} == $new->port } @data),
		sql_new => scalar(grep { $_->{who} eq 'sql' && $_->{port} == $new->port } @data),
		lost => scalar(grep { $_->{kept} ne 't' } @data),
		n => $n, n_ran => $n_ran, n_kept => $n_kept, output => $out);
	@r{qw(twice lower)} = token_facts(\@data) if $o{fenced};
	diag(sprintf(
		"%s: Java %s, of which %d had lost their lock by the unlock; "
		  . "SQL %d sections ran, %d committed, lock calls failed: %s; "
		  . "overlapping pairs %d (%s), "
		  . "%d without the Java sections that lost their lock, "
		  . "%d with the SQL sections lost at commit; %s%s",
		$label, $r{java}, $r{lost}, $r{sql_ran}, $r{sql_committed},
		join(', ', map { "$errors{$_} $_" } sort keys %errors) || 'none',
		$n->{total} // 0,
		join(', ', map { "$_: $n->{$_}" } grep { $_ ne 'total' } sort keys %$n) || 'none',
		$n_kept->{total} // 0, $n_ran->{total} // 0,
		defined $first
		? sprintf('from %.2f s to %.2f s after the failover was asked for',
			$first - $asked, $last - $asked)
		: 'no window',
		$o{fenced}
		? sprintf('; tokens given to a Java and an SQL section both: %d, '
			  . 'sections with a lower token than one ended before them: %d',
			$r{twice}, $r{lower})
		: ''));

	if (($o{how} // 'failover') eq 'kill')
	{
		$dep->restart_node($old);
	}
	else
	{
		$dep->wait_converted($old, 30)
		  or die 'the old primary was not converted to a replica';
		$dep->wait_synced($old, 30)
		  or die 'the old primary did not sync with the new one';
	}
	return \%r;
}

# The load ran on both sides before the failover and went on on the new
# primary, and pgbench kept all its clients.
sub load_ran
{
	my ($r, $label) = @_;
	ok($r->{ready}, "$label: each side ran 20 sections before the failover");
	cmp_ok($r->{on_new}, '>', 0, "$label: sections ran on the new primary");
	is($r->{aborted}, 0, "$label: no pgbench client aborted")
	  or diag($r->{output});
}

#---- everything at its defaults ----

my $r;
for my $version (@RlockTest::Redisson::VERSIONS)
{
	$r = mixed_failover("Redisson $version, defaults, SENTINEL FAILOVER",
		java => { version => $version });
	load_ran($r, "Redisson $version, defaults");
}

#---- a Redisson that asks the Sentinels every 20 s ----

$r = mixed_failover('scanInterval 20 s, SENTINEL FAILOVER',
	java => { scan_interval => 20000 }, fenced => 1);
load_ran($r, 'scanInterval 20 s');
cmp_ok($r->{n}{'java old, sql new'} // 0, '>', 0,
	'scanInterval 20 s: Java sections on the old primary overlap SQL sections on the new one');
cmp_ok($r->{twice}, '>', 0,
	'scanInterval 20 s: the two primaries give out the same fencing tokens');

#---- min-replicas-to-write 1 ----

$r = mixed_failover('min-replicas-to-write 1, scanInterval 20 s, SENTINEL FAILOVER',
	java => { scan_interval => 20000 }, min_replicas => 1);
load_ran($r, 'min-replicas-to-write 1');
is($r->{n}{total} // 0, 0,
	'min-replicas-to-write 1: no two sections overlap, though Redisson stays on the old primary');
like($r->{java}, qr/first=RedisNoReplicasException/,
	'min-replicas-to-write 1: the old primary refuses Redisson\'s lock once its replicas left');
cmp_ok($r->{sql_new}, '>', 0,
	'min-replicas-to-write 1: meanwhile SQL sessions commit sections on the new primary');

# A Redisson lock the killed primary granted and had no time to copy is
# gone with it: Redisson learns that at the unlock
# (IllegalMonitorStateException), and the section may have overlapped
# the next holder's.  That is the loss any asynchronous copy allows, not
# two primaries taking writes: the sections whose lock held to the end
# must not overlap.
$r = mixed_failover('min-replicas-to-write 1, primary killed',
	min_replicas => 1, how => 'kill');
load_ran($r, 'min-replicas-to-write 1, primary killed');
is($r->{n_kept}{total} // 0, 0,
	'min-replicas-to-write 1, primary killed: no two sections whose lock held overlap');

$node->stop;
$dep->stop;
done_testing();
