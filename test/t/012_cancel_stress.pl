# Cancellation races under load: four sessions take and release eight hot
# keys in a loop with lock_timeouts of a few milliseconds, caught by
# PL/pgSQL exception blocks, while Redis is paused now and then so that
# timeouts also hit requests whose command is on the wire.  Afterwards no
# two critical sections on a key overlapped, nothing is left in Redis, and
# every entry of the hold table is free.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'cancellation does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('stress', $redis,
	conf => ['rlock.max_locks = 64', 'log_min_messages = warning']);
$node->safe_psql('postgres', q{
	CREATE TABLE spans (k int, s timestamptz, e timestamptz);
	CREATE FUNCTION churn(n int) RETURNS int LANGUAGE plpgsql AS $$
	DECLARE
		k int;
		t0 timestamptz;
		timeouts int := 0;
	BEGIN
		FOR i IN 1 .. n LOOP
			k := 1 + floor(random() * 8)::int;
			BEGIN
				PERFORM set_config('lock_timeout',
								   (1 + floor(random() * 5)::int) || 'ms', true);
				PERFORM rlock_lock('stress:' || k);
				t0 := clock_timestamp();
				PERFORM pg_sleep(0.0002);
				INSERT INTO spans VALUES (k, t0, clock_timestamp());
				PERFORM rlock_release('stress:' || k);
			EXCEPTION WHEN lock_not_available THEN
				timeouts := timeouts + 1;
			END;
		END LOOP;
		RETURN timeouts;
	END $$;
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my @runs;
for my $i (1 .. 4)
{
	push @runs,
	  IPC::Run::start(
		[
			'psql', '-X', '-At', '-d', $node->connstr('postgres'),
			'-c', 'SELECT churn(500)'
		],
		'>', "$dir/churn$i.out",
		'2>', "$dir/churn$i.err");
}
# pause Redis for a few milliseconds, now and then, while they run
for my $i (1 .. 20)
{
	$redis->cmd('CLIENT', 'PAUSE', 5 + int(rand(20)), 'ALL');
	sleep(0.05 + rand(0.1));
}
my $all_ok = 1;
$all_ok &&= $_->finish for @runs;
ok($all_ok, 'four sessions ran 500 iterations each');
my $timeouts = 0;
for my $i (1 .. 4)
{
	$timeouts += slurp_file("$dir/churn$i.out");
}
my $taken = $node->safe_psql('postgres', 'SELECT count(*) FROM spans');
note "critical sections: $taken, timeouts: $timeouts";
cmp_ok($timeouts, '>', 0, "timeouts happened ($timeouts)");
is($taken + $timeouts, 2000, 'every iteration either held the lock or timed out');

is(RlockTest::overlapping_spans($node), '0',
	'no two critical sections on one key overlapped');

ok(RlockTest::wait_until(sub { @{ $redis->cmd('KEYS', 'stress:*') } == 0 }, 10),
	'no lock is left in Redis');
ok(!grep({ $redis->subscribers("stress:$_") } 1 .. 8), 'nor a subscription');

ok(RlockTest::hold_table_free($node, 64, 'stress:free:'),
	'every entry of the hold table is free');

done_testing();
