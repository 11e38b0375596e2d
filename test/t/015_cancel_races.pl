# Cancellation races, at scale: more than 10,000 acquires interrupted by
# lock_timeout, pg_cancel_backend (caught by PL/pgSQL handlers for
# query_canceled), statement_timeout and pg_terminate_backend, while Redis
# is paused now and then (CLIENT PAUSE) so that many interruptions hit
# requests whose command is on the wire.  Afterwards: no lock held by
# nobody (no key in Redis, no hold in any session, every entry of the hold
# table free, no subscription left) and no two critical sections on one key
# ever overlapped.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'cancellation does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('races', $redis,
	conf => [
		'rlock.max_locks = 64', 'log_min_messages = warning',
		'log_statement = none', 'log_min_error_statement = panic'
	]);
$node->safe_psql('postgres', q{
	CREATE TABLE spans (k text, s timestamptz, e timestamptz);
	CREATE FUNCTION churn(n int, nkeys int)
	RETURNS TABLE (iterations int, interrupted int, sections int,
				   still_held int)
	LANGUAGE plpgsql AS $$
	DECLARE
		k text;
		got boolean;
		t0 timestamptz;
	BEGIN
		iterations := 0;
		interrupted := 0;
		sections := 0;
		FOR i IN 1 .. n LOOP
			BEGIN
				iterations := iterations + 1;
				got := false;
				k := 'race:' || (1 + floor(random() * nkeys)::int);
				PERFORM set_config('lock_timeout',
								   (1 + floor(random() * 3)::int) || 'ms', true);
				PERFORM rlock_lock(k);
				got := true;
				t0 := clock_timestamp();
				PERFORM pg_sleep(0.0005);
				INSERT INTO spans VALUES (k, t0, clock_timestamp());
				PERFORM rlock_release(k);
				sections := sections + 1;
			EXCEPTION WHEN lock_not_available OR query_canceled THEN
				IF NOT got THEN
					interrupted := interrupted + 1;
				END IF;
			END;
		END LOOP;
		SELECT count(*) INTO still_held FROM generate_series(1, nkeys) j
		WHERE rlock_held('race:' || j) > 0;
		RETURN NEXT;
	END $$;
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my $conn = $node->connstr('postgres');

# Run one round: four sessions churning on two hot keys, one acquiring
# under a statement_timeout of 2 ms, while sessions are cancelled at random
# and Redis is paused now and then.  Returns the counts of the round.
sub round
{
	my ($r) = @_;
	my @churn;
	for my $i (1 .. 4)
	{
		my $script = "$dir/churn$r-$i.sql";
		open(my $fh, '>', $script) or die $!;
		print $fh "SELECT * FROM churn(500, 2);\n" for 1 .. 3;
		close $fh;
		push @churn,
		  IPC::Run::start([ 'psql', '-X', '-At', '-d', $conn, '-f', $script ],
			'>', "$dir/churn$r-$i.out", '2>', "$dir/churn$r-$i.err");
	}
	open(my $fh, '>', "$dir/timeout$r.sql") or die $!;
	print $fh "SET statement_timeout = '2ms';\n";
	print $fh "SELECT rlock_lock('race:' || (1 + floor(random() * 2)::int));\n"
	  for 1 .. 300;
	close $fh;
	my $timeouts = IPC::Run::start(
		[ 'psql', '-X', '-At', '-d', $conn, '-f', "$dir/timeout$r.sql" ],
		'>', "$dir/timeout$r.out", '2>', "$dir/timeout$r.err");

	my %n = (cancels => 0, pauses => 0, calls => 0, iterations => 0,
		interrupted => 0, sections => 0, held => 0, timeouts => 0);
	while (grep { $_->pumpable } @churn)
	{
		my $pids = $node->safe_psql('postgres',
			"SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE query LIKE 'SELECT * FROM churn%' AND state = 'active'"
		);
		if ($pids ne '')
		{
			my @p = split /,/, $pids;
			$node->safe_psql('postgres',
				'SELECT pg_cancel_backend(' . $p[ int(rand(@p)) ] . ')');
			$n{cancels}++;
		}
		if (rand() < 0.3)
		{
			$redis->cmd('CLIENT', 'PAUSE', 5 + int(rand(20)), 'ALL');
			$n{pauses}++;
		}
		sleep(0.01);
	}
	$_->finish for @churn;
	$timeouts->finish;

	for my $i (1 .. 4)
	{
		for my $line (split /\n/, slurp_file("$dir/churn$r-$i.out"))
		{
			my ($it, $int, $sec, $held) = split /\|/, $line;
			$n{iterations} += $it;
			$n{interrupted} += $int;
			$n{sections} += $sec;
			$n{held} += $held;
			$n{calls}++;
		}
	}
	$n{timeouts} = () = slurp_file("$dir/timeout$r.err") =~
	  /canceling statement due to statement timeout/g;
	return \%n;
}

# rounds until more than 10,000 acquires were interrupted (or 4 minutes)
my %total;
my $deadline = time + 240;
for (my $r = 1; time < $deadline; $r++)
{
	my $n = round($r);
	$total{$_} += $n->{$_} for keys %$n;
	last if $total{interrupted} + $total{timeouts} >= 10_000;
}
note join(', ', map { "$_ $total{$_}" } sort keys %total);
cmp_ok($total{interrupted} + $total{timeouts}, '>=', 10_000,
	'more than 10,000 acquires were interrupted ('
	  . ($total{interrupted} + $total{timeouts}) . ')');
cmp_ok($total{sections}, '>', 500,
	"and many got their lock ($total{sections})");
cmp_ok($total{cancels}, '>', 0, "sessions were cancelled ($total{cancels})");
is($total{held}, 0, 'after each churn call its session held nothing');

# pg_terminate_backend of sessions waiting or acquiring, Redis paused
my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT rlock_session_try('race:held')");
for my $i (1 .. 20)
{
	my $v = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $v->query_safe('SELECT pg_backend_pid()');
	$redis->cmd('CLIENT', 'PAUSE', 30, 'ALL') if $i % 2;
	$v->query_until(qr/go/, "\\echo go\nSELECT rlock_lock('race:held');\n");
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	eval { $v->quit };
}
$holder->quit;

# nothing is held by nobody
ok(RlockTest::wait_until(sub { @{ $redis->cmd('KEYS', 'race:*') } == 0 }, 10),
	'no lock is left in Redis');
ok(!grep({ $redis->subscribers("race:$_") } (1, 2, 'held')),
	'no subscription is left');
ok(RlockTest::hold_table_free($node, 64, 'race:free:'),
	'every entry of the hold table is free');

is(RlockTest::overlapping_spans($node), '0',
	'no two critical sections on one key overlapped');

done_testing();
