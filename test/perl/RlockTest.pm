
=pod

=head1 NAME

RlockTest - throw-away Redis servers, a small Redis client and PostgreSQL
nodes with rlock, for rlock's TAP tests

=head1 SYNOPSIS

  use RlockTest;

  my $redis = RlockTest::Redis->start;
  my $node = RlockTest::node('main', $redis);
  $node->safe_psql('postgres', "SELECT rlock_try('k')");
  is($redis->cmd('EXISTS', 'k'), 0, 'released');
  $redis->stop;

=cut

package RlockTest;

use strict;
use warnings;

# PostgreSQL 16's Makefiles name the test directory by TESTDATADIR, 15's
# TAP modules (which the matrix's 16 row borrows) read TESTDIR: without
# it their data directories and temporary files are relative paths, which
# a server resolves against its own data directory.  Set before the
# modules' INIT blocks read it.
BEGIN
{
	if (!$ENV{TESTDIR} && ($ENV{TESTDATADIR} // '') =~ m{^(/.*)/tmp_check/?$})
	{
		$ENV{TESTDIR} = $1;
	}
}

use IO::Socket::INET;
use IPC::Run ();
use POSIX ();
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest::ACL;
use RlockTest::Resp;
use RlockTest::Redis;

# A PostgreSQL node with rlock preloaded and pointed at a Redis server
# (over TLS, checking its certificate, when it has a TLS port), started,
# with the extension created in database "postgres".  Options:
# connect_timeout, command_timeout, conf (more lines of postgresql.conf),
# init (PostgreSQL::Test::Cluster's init options, as allows_streaming).
# When the whole suite runs as the documented Redis users
# (RlockTest::ACL::everywhere), rlock connects as them, unless the node's
# settings name a user of their own (a test about other users).
sub node
{
	my ($name, $redis, %opt) = @_;
	my @conf = @{ $opt{conf} // [] };
	push @conf, RlockTest::ACL::node_conf(@conf)
	  if RlockTest::ACL::everywhere()
	  && !grep { /^\s*rlock\.username\s*=/ } @conf;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opt{init} // {} });
	my @tls;
	@tls = (
		"rlock.tls = 'verify-full'",
		"rlock.tls_ca_file = '" . $redis->certs->{ca} . "'")
	  if $redis->tls_port;
	$node->append_conf('postgresql.conf', join("\n",
		"shared_preload_libraries = 'rlock'",
		"rlock.port = " . $redis->rlock_port,
		@tls,
		"rlock.connect_timeout = " . ($opt{connect_timeout} // '1s'),
		"rlock.command_timeout = " . ($opt{command_timeout} // '1s'),
		"log_min_messages = info",
		@conf, ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION rlock');
	# the worker shows in pg_stat_activity a moment after the start
	wait_until(sub { worker_pid($node) ne '' }, 10)
	  or die 'the rlock worker of node ' . $node->name . ' did not start';
	return $node;
}

# A Sentinel deployment (a primary, two replicas, three Sentinels, master
# "main", quick to fail over) and instances named @names following it,
# with replicas confirming (rlock.sync_replicas = 1) and a watchdog of
# 3 s, each having found the primary; returns the deployment and them.
sub sentinel_nodes
{
	my (@names) = @_;
	my $dep = RlockTest::Sentinel->start(
		replicas => 2,
		sentinels => 3,
		master_name => 'main',
		down_after_ms => 1000,
		failover_timeout_ms => 4000);
	my @conf = (
		"rlock.topology = 'sentinel'",
		"rlock.nodes = '" . $dep->nodes_setting . "'",
		"rlock.sentinel_master = 'main'",
		"rlock.sync_replicas = '1'",
		"rlock.sync_timeout = '1s'",
		"rlock.watchdog_timeout = '3s'");
	my @nodes = map { node($_, $dep->data_nodes->[0], conf => [@conf]) } @names;
	for my $n (@nodes)
	{
		wait_for_redis($n, 15) or die $n->name . ' did not find the primary';
	}
	return ($dep, @nodes);
}

# Instances named @names of the Redis Cluster $cluster, its primaries as
# seeds, with a watchdog of 3 s, each knowing the map of every primary
# and connected to them; returns them.
sub cluster_nodes
{
	my ($cluster, @names) = @_;
	my @primaries = $cluster->primaries;
	my $seeds = join(',', map { '127.0.0.1:' . $_->rlock_port } @primaries);
	my @conf = (
		"rlock.topology = 'cluster'",
		"rlock.nodes = '$seeds'",
		"rlock.watchdog_timeout = '3s'");
	my @nodes = map { node($_, $primaries[0], conf => [@conf]) } @names;
	for my $n (@nodes)
	{
		wait_for_cluster_map($n, scalar @primaries)
		  or die $n->name . ' did not learn the cluster map';
	}
	return @nodes;
}

# Wait (10 s at most) until one request of $node waits for lock $key, as
# rlock_locks shows; returns whether it did.
sub waiting_in_sql
{
	my ($node, $key) = @_;
	return wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM rlock_locks WHERE key = '$key' AND state = 'waiting'")
			  == 1;
		},
		10);
}

# Wait (20 s at most) until $node, with rlock.topology = cluster, knows a
# slot map of $primaries primaries and is connected to them; returns
# whether it did.
sub wait_for_cluster_map
{
	my ($node, $primaries) = @_;
	return wait_until(
		sub {
			$node->safe_psql('postgres',
				'SELECT cluster_primaries, command_connection, subscriber_connection FROM rlock_status()')
			  eq "$primaries|ready|ready";
		},
		20);
}

# Poll $check->() until it returns true, for at most $seconds; returns
# whether it did.
sub wait_until
{
	my ($check, $seconds) = @_;
	my $deadline = time + ($seconds // 30);
	while (time < $deadline)
	{
		return 1 if $check->();
		usleep(20_000);
	}
	return 0;
}

# Wait until $node answers a query again, after a crash restart: what
# poll_query_until does, but a psql that exits before it reads its
# query (the server still refusing) is one more try here, where the
# write to its stdin failing with EPIPE would end the test script.
sub wait_back
{
	my ($node, $seconds) = @_;
	return wait_until(
		sub {
			my $out = eval {
				$node->safe_psql('postgres', 'SELECT true', timeout => 10);
			};
			return defined $out && $out eq 't';
		},
		$seconds // 180);
}

# Wait until the TTL of $key goes up between two looks (leases only go
# down unless renewed); returns whether it did within $seconds.
sub wait_for_renewal
{
	my ($redis, $key, $seconds) = @_;
	my $prev = $redis->cmd('PTTL', $key);
	return wait_until(
		sub {
			my $now = $redis->cmd('PTTL', $key);
			my $renewed = $now > $prev + 50;
			$prev = $now;
			return $renewed;
		},
		$seconds);
}

# Wait until $n clients are subscribed to the unlock channel of lock $key.
sub wait_for_subscribers
{
	my ($redis, $key, $n, $seconds) = @_;
	return wait_until(sub { $redis->subscribers($key) == $n }, $seconds);
}

# Write $secret as the first line of a new 0600 file in $dir, named $name
# (redis.pw); returns the path (for rlock.password_file).
sub password_file
{
	my ($dir, $secret, $name) = @_;
	my $path = "$dir/" . ($name // 'redis.pw');
	open(my $fh, '>', $path) or die "cannot write $path: $!";
	print $fh "$secret\n";
	close $fh;
	chmod 0600, $path;
	return $path;
}

# The pid of the rlock worker of a node, or '' if none runs.
sub worker_pid
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'rlock worker'");
}

# Wait until the node's worker has its command connection: a lock can be
# taken and released.
sub wait_for_redis
{
	my ($node, $seconds) = @_;
	return wait_until(
		sub {
			my ($rc, $out) = $node->psql('postgres',
				"SELECT rlock_try('rlocktest:probe')");
			return $rc == 0 && $out eq 't';
		},
		$seconds);
}

# Run $sql in database "postgres" with verbose errors (SQLSTATE and
# detail); returns psql's exit code, output, errors and the seconds taken.
sub timed_psql
{
	my ($node, $sql) = @_;
	my $t0 = time;
	my ($rc, $out, $err) =
	  $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return ($rc, $out, $err, time - $t0);
}

# Run $sql in session $s (RlockTest::session's) while $redis sleeps for a
# second (DEBUG SLEEP: the server started with --enable-debug-command
# local), so that its commands go unanswered past a short
# rlock.command_timeout.  Returns its output, its error output, and what
# $mon, a MONITOR connection of $redis, saw meanwhile (a list reference).
sub while_redis_sleeps
{
	my ($redis, $mon, $s, $sql) = @_;
	$mon->drain(0.05);
	my $dbg = $redis->connect;
	$dbg->send_cmd('DEBUG', 'SLEEP', '1');
	$s->{stderr} = '';
	my $out = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	$dbg->read_reply(5);
	return ($out, $err, [ $mon->drain(0.3) ]);
}

# A background_psql session of $node that goes on after an error, with
# verbose errors (SQLSTATEs); its backend's pid is $s->{rlock_pid}, its
# node $s->{rlock_node}.
sub session
{
	my ($node) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	$s->{rlock_pid} = $s->query_safe('SELECT pg_backend_pid()');
	$s->{rlock_node} = $node;
	return $s;
}

# Start $sql in a background_psql session (opened with on_error_stop =>
# 0) without waiting for it to end; collect() gets its outcome.
sub send_query
{
	my ($psql, $sql) = @_;
	$psql->query_until(qr/rlocktest: sent\n/, "\\echo rlocktest: sent\n$sql\n");
}

# Wait for what send_query started to end; returns its output and its
# error output, and clears both from the session.
sub collect
{
	my ($psql) = @_;
	my $out = $psql->query('');
	my $err = $psql->{stderr};
	$psql->{stderr} = '';
	return ($out, $err);
}

# How many of the backends @pids run a statement (state active), and with
# $waiting, one that waits for the worker (wait event type Extension).
sub _count_backends
{
	my ($node, $waiting, @pids) = @_;
	return 0 unless @pids;
	return $node->safe_psql('postgres',
		'SELECT count(*) FROM pg_stat_activity WHERE pid IN ('
		  . join(',', @pids)
		  . ") AND state = 'active'"
		  . ($waiting ? " AND wait_event_type = 'Extension'" : ''));
}

sub count_waiting { my $node = shift; return _count_backends($node, 1, @_) }
sub count_active { my $node = shift; return _count_backends($node, 0, @_) }

# Wait until the node runs a worker other than the one with pid $old;
# returns whether it did within $seconds.
sub wait_for_new_worker
{
	my ($node, $old, $seconds) = @_;
	return wait_until(
		sub {
			my $pid = worker_pid($node);
			return $pid ne '' && $pid ne $old;
		},
		$seconds // 10);
}

# How many critical sections recorded in table spans (k key, s start,
# e end) began before the previous one on the same key had ended.
sub overlapping_spans
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
		SELECT count(*) FROM (
			SELECT s < lag(e) OVER (PARTITION BY k ORDER BY s) AS overlap
			FROM spans) x
		WHERE overlap});
}

# The most of the half-open intervals [start, end) (array refs, numbers
# of one unit) open at one instant; an interval that ends where another
# begins does not overlap it.
sub most_at_once
{
	my @ev;
	for (@_)
	{
		push @ev, [ $_->[0], 1 ], [ $_->[1], -1 ];
	}
	# at one instant, ends before starts
	@ev = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @ev;
	my ($open, $most) = (0, 0);
	for (@ev)
	{
		$open += $_->[1];
		$most = $open if $open > $most;
	}
	return $most;
}

# Guarded load: pgbench clients on several instances take lock $key in
# every transaction and, when they got it, run a short critical section.
# Each section is a row of table spans (node, s, e) when its transaction
# commits, and a server log line "rlock-span <node> <s> <e>" in any case:
# the rows are what the data saw, the log lines every section that ran,
# even those whose commit then failed (a lock lost: 40001).  Options:
# seconds (12), clients per instance (3), lease ('10s'), dir (for the
# scripts).  Returns the pgbench harnesses; finish them with
# guarded_load_finish.
sub guarded_load_start
{
	my ($nodes, $key, %opt) = @_;
	my $dir = $opt{dir} // PostgreSQL::Test::Utils::tempdir();
	my @runs;
	for my $node (@$nodes)
	{
		$node->safe_psql('postgres', q{
			CREATE TABLE IF NOT EXISTS spans (node text, s timestamptz, e timestamptz);
			CREATE OR REPLACE FUNCTION try_lock(k text, lease text)
			RETURNS int LANGUAGE plpgsql AS $$
			BEGIN
				PERFORM rlock_lock(k, lease::interval);
				RETURN 1;
			EXCEPTION WHEN OTHERS THEN
				RETURN 0;
			END $$;
			CREATE OR REPLACE FUNCTION span(who text, s float8)
			RETURNS void LANGUAGE plpgsql AS $$
			DECLARE
				e timestamptz := clock_timestamp();
			BEGIN
				INSERT INTO spans VALUES (who, to_timestamp(s), e);
				RAISE LOG 'rlock-span % % %', who, s, extract(epoch FROM e);
			END $$;
			TRUNCATE spans;
		});
		my $name = $node->name;
		my $script = "$dir/$name.sql";
		open(my $fh, '>', $script) or die "$script: $!";
		print $fh "BEGIN;\n"
		  . "SELECT try_lock('$key', '" . ($opt{lease} // '10s') . "') AS got \\gset\n"
		  . "\\if :got\n"
		  . "SELECT extract(epoch FROM clock_timestamp()) AS s \\gset\n"
		  . "SELECT pg_sleep(0.002);\n"
		  . "SELECT span('$name', :s);\n"
		  . "\\endif\n"
		  . "COMMIT;\n";
		close $fh;
		my $out = '';
		push @runs, {
			node => $node,
			log_from => -s $node->logfile,
			out => \$out,
			h => IPC::Run::start(
				[ 'pgbench', '-n', '-c', $opt{clients} // 3, '-j', '1',
				  '-T', $opt{seconds} // 12, '-f', $script,
				  '-h', $node->host, '-p', $node->port, 'postgres' ],
				'<', \undef, '>&', \$out) };
	}
	return \@runs;
}

# Wait for the runs of guarded_load_start to end; returns a summary:
# committed and ran (the spans, as [node, s, e] sorted by start), their
# overlaps (a section that began before the one before it ended), and
# failed (transactions pgbench counted as failed: serialization failures,
# that is locks lost at commit), aborted (pgbench clients stopped by
# another error) and output (pgbench's).
sub guarded_load_finish
{
	my ($runs) = @_;
	my (@committed, @ran, $failed, $aborted);
	for my $run (@$runs)
	{
		$run->{h}->finish;
		my $node = $run->{node};
		my $name = $node->name;
		push @committed, map { [ split /\|/ ] } split /\n/,
		  $node->safe_psql('postgres',
			"SELECT node, extract(epoch FROM s), extract(epoch FROM e) FROM spans");
		my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile,
			$run->{log_from});
		push @ran, [ $1, $2, $3 ]
		  while $log =~ /rlock-span (\S+) (\S+) (\S+)$/mg;
		$failed += $1
		  if ${ $run->{out} } =~ /number of failed transactions: (\d+)/;
		$aborted += () = ${ $run->{out} } =~ /^pgbench: error: client \d+ aborted/mg;
	}
	my %r = (failed => $failed // 0, aborted => $aborted // 0, output => join('', map { ${ $_->{out} } } @$runs));
	for ([ committed => \@committed ], [ ran => \@ran ])
	{
		my ($what, $spans) = @$_;
		my @sorted = sort { $a->[1] <=> $b->[1] } @$spans;
		my $overlaps = 0;
		for my $i (1 .. $#sorted)
		{
			$overlaps++ if $sorted[$i][1] < $sorted[ $i - 1 ][2];
		}
		$r{$what} = \@sorted;
		$r{"${what}_overlaps"} = $overlaps;
	}
	return \%r;
}

# Hot-key load: $opt{clients} (8) pgbench clients on $node loop for
# $opt{seconds} (8) over BEGIN, rlock_try($key, '30 s'), an UPDATE of one
# row, COMMIT.  Returns a summary: per client (by number) the transactions
# it committed and its longest transaction in ms, and the longest of all,
# the fewest any client committed, the total, and pgbench's output.
sub hot_key_load
{
	my ($node, $key, %opt) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $clients = $opt{clients} // 8;
	$node->safe_psql('postgres', q{
		CREATE TABLE IF NOT EXISTS hot_row (n bigint);
		TRUNCATE hot_row;
		INSERT INTO hot_row VALUES (0);
	});
	open(my $fh, '>', "$dir/hot.sql") or die "$dir/hot.sql: $!";
	print $fh "BEGIN;\n"
	  . "SELECT rlock_try('$key', '30 s');\n"
	  . "UPDATE hot_row SET n = n + 1;\n"
	  . "COMMIT;\n";
	close $fh;
	my $out = '';
	IPC::Run::run(
		[ 'pgbench', '-n', '-c', $clients, '-j', '2',
		  '-T', $opt{seconds} // 8, '-f', "$dir/hot.sql",
		  '-l', '--log-prefix', "$dir/log",
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'<', \undef, '>&', \$out);
	my %r = (clients => {}, output => $out, max_ms => 0, total => 0);
	$r{clients}{$_} = { count => 0, max_ms => 0 } for 0 .. $clients - 1;
	for my $log (glob("$dir/log.*"))
	{
		open(my $lf, '<', $log) or die "$log: $!";
		while (<$lf>)
		{
			# client_id transaction_no time script_no time_epoch time_us
			my ($client, undef, $us) = split;
			my $c = $r{clients}{$client};
			$c->{count}++;
			$c->{max_ms} = $us / 1000 if $us / 1000 > $c->{max_ms};
		}
		close $lf;
	}
	for my $c (values %{ $r{clients} })
	{
		$r{total} += $c->{count};
		$r{max_ms} = $c->{max_ms} if $c->{max_ms} > $r{max_ms};
	}
	my @counts = sort { $a <=> $b } map { $_->{count} } values %{ $r{clients} };
	$r{min_count} = $counts[0];
	return \%r;
}

# The text of a Lua script as Redis runs it: each line "--@include
# <file>" replaced by that file's code on one line, as src/kinds/embed-lua
# does.
sub script_text
{
	my ($path) = @_;
	my $dir = $path =~ s{/[^/]*$}{}r;
	my $text = '';
	for my $line (split /^/, PostgreSQL::Test::Utils::slurp_file($path))
	{
		if ($line =~ /^--\@include (\S+)$/)
		{
			my @code = grep { !/^\s*--/ && /\S/ }
			  split /\n/, PostgreSQL::Test::Utils::slurp_file("$dir/$1");
			s/^\s+// for @code;
			$line = join(' ', @code) . "\n";
		}
		$text .= $line;
	}
	return $text;
}

# Build test/unit/$name.c (test/unit/README.md) and return the program's
# path; bails out when it does not build.
sub unit_program
{
	my ($name) = @_;
	my $top = $ENV{TESTDIR} // '.';
	my $log = '';
	IPC::Run::run([ 'make', '-s', '-C', $top, "test/out/unit/$name" ],
		'<', \undef, '>&', \$log)
	  or BAIL_OUT("building test/unit/$name failed:\n$log");
	return "$top/test/out/unit/$name";
}

# Wait until a session can take $n locks at once (prefix "$prefix"), then
# let them go: with rlock.max_locks = $n, that every entry of the hold table
# came free.  True if it did within $seconds.
sub hold_table_free
{
	my ($node, $n, $prefix, $seconds) = @_;
	my $s = $node->background_psql('postgres');
	my $free = wait_until(
		sub {
			my $taken = $s->query_safe(
				"SELECT count(*) FROM generate_series(1, $n) i WHERE rlock_session_try('$prefix' || i)"
			);
			$s->query_safe('SELECT rlock_release_all()');
			return $taken eq $n;
		},
		$seconds // 10);
	$s->quit;
	return $free;
}

# Is the IPC::Run harness $h still running?  Collects its output so far.
sub still_running
{
	my ($h) = @_;
	return 0 unless $h->pumpable;
	eval { $h->pump_nb };
	return $h->pumpable;
}

# Watch the leases of $keys (one key, or a reference to a list of them)
# until all are gone, for at most $seconds; true if they went without ever
# being renewed (their TTLs only went down).
sub expires_unrenewed
{
	my ($redis, $keys, $seconds) = @_;
	my @keys = ref $keys ? @$keys : ($keys);
	my %prev = map { $_ => $redis->cmd('PTTL', $_) } @keys;
	my $renewed = 0;
	my $gone = wait_until(
		sub {
			my $left = 0;
			for my $key (@keys)
			{
				my $now = $redis->cmd('PTTL', $key);
				$renewed = 1 if $now > $prev{$key} + 50;
				$prev{$key} = $now;
				$left++ if $now != -2;
			}
			return $left == 0 || $renewed;
		},
		$seconds);
	return $gone && !$renewed;
}

# Free a loopback TCP port.
sub free_port
{
	my $s = IO::Socket::INET->new(
		Listen => 1,
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		Proto => 'tcp') or die "no free port: $!";
	my $port = $s->sockport;
	close $s;
	return $port;
}


#---- deadlocks (tests 102 to 108) ----

# pg_stat_database.deadlocks of database postgres on $node, once each
# session of @flush has had its counts flushed (at its next statement's
# end: as it runs pg_stat_force_next_flush())
sub deadlocks
{
	my ($node, @flush) = @_;
	$_->query_safe('SELECT pg_stat_force_next_flush()') for @flush;
	return $node->safe_psql('postgres',
		"SELECT deadlocks FROM pg_stat_database WHERE datname = 'postgres'");
}

# Wait (10 s at most) until the backend of session $s (made by session())
# waits for a lock, rlock's or PostgreSQL's; returns whether it did.
sub in_wait
{
	my ($s) = @_;
	return wait_until(
		sub {
			$s->{rlock_node}->safe_psql('postgres',
				"SELECT wait_event_type IN ('Lock', 'Extension') FROM pg_stat_activity WHERE pid = $s->{rlock_pid}")
			  eq 't';
		},
		10);
}

# Pump the sessions @$sessions (sent statements, send_query) until one has
# failed with 40P01, 15 s at most; returns those that have by then, and
# how long after $t0 the first did (undef if none).
sub deadlock_victims
{
	my ($sessions, $t0) = @_;
	my (@v, $first);
	my $deadline = time + 15;
	while (!@v && time < $deadline)
	{
		for my $s (@$sessions)
		{
			$s->{run}->pump_nb;
			if ($s->{stderr} =~ /40P01/)
			{
				$first //= time - $t0;
				push @v, $s;
			}
		}
		Time::HiRes::usleep(10_000);
	}
	return (\@v, $first);
}

# A pgbench script in $dir whose transactions wait for each other in
# chains but never in a cycle: keys $prefix<1 to 25> (exclusive, or shared
# half the time), then <26 to 50> as fair locks, then a row of table rows
# (ids 1 to 50), held 0 to $max_ms ms: one order for all.
sub deadlock_free_script
{
	my ($dir, $prefix, $max_ms) = @_;
	my $script = "$dir/storm.sql";
	open(my $fh, '>', $script) or die "$script: $!";
	print $fh "\\set k1 random(1, 25)\n"
	  . "\\set k2 random(26, 50)\n"
	  . "\\set r random(1, 50)\n"
	  . "\\set shared random(0, 1)\n"
	  . "\\set ms random(0, $max_ms)\n"
	  . "BEGIN;\n"
	  . "\\if :shared\n"
	  . "SELECT rlock_lock_shared('$prefix' || :k1);\n"
	  . "\\else\n"
	  . "SELECT rlock_lock('$prefix' || :k1);\n"
	  . "\\endif\n"
	  . "SELECT rlock_lock_fair('$prefix' || :k2);\n"
	  . "UPDATE rows SET v = v + 1 WHERE id = :r;\n"
	  . "SELECT pg_sleep(:ms / 1000.0);\n"
	  . "COMMIT;\n";
	close $fh;
	return $script;
}

1;
