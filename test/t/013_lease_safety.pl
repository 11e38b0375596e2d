# Lease safety: the watchdog keeps a lock through a long query; a lost lock
# is reported (session scope) or fails the commit with 40001 (transaction
# scope); the check before the commit extends a short lease to the margin,
# asks Redis at every commit by default, and with rlock.verify_at_commit
# = lease is left out when Redis confirmed a longer lease on the
# connection still open;
# an explicit lease runs out on time and hands the lock to a waiter at
# once; fencing tokens grow across rlock and Redisson-style clients.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('lease', $redis,
	conf => [
		"rlock.watchdog_timeout = '1500ms'",
		"wal_level = replica", "max_wal_senders = 2",
		"synchronous_standby_names = 'nobody'",
		"synchronous_commit = local"
	]);

sub psql_err
{
	my ($sql) = @_;
	my ($rc, $out, $err) =
	  $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return ($rc, $out, $err);
}

# the watchdog keeps a lock through a query three leases long
my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:long')");
my $t0 = time;
$s->query_until(qr/sleeping/, "\\echo sleeping\nSELECT pg_sleep(4.5);\n");
ok( RlockTest::wait_until(sub { time - $t0 > 3.2 }, 10)
	  && $redis->cmd('EXISTS', 'ls:long') == 1,
	'more than two leases into a long query the lock is still there');
$s->query("SELECT 'slept'");
is($s->query_safe('COMMIT'), '', 'and the commit succeeds');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'ls:long') == 0 }, 5),
	'releasing it');

# a session-scoped lock lost: the renewal finds it gone, rlock_held says so
$s->query_safe("SELECT rlock_session_try('ls:session')");
$redis->cmd('DEL', 'ls:session');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'ls:session') == 0 }),
	'someone removes a session lock');
my $held;
ok( RlockTest::wait_until(
		sub {
			$held = $s->query("SELECT rlock_held('ls:session')");
			$held eq '0';
		},
		5),
	'after the next renewal the session no longer counts it');
like($s->{stderr}, qr/WARNING:  session-scoped lock "ls:session" was lost/,
	'and warns about it');
$s->{stderr} = '';
ok(!RlockTest::wait_for_renewal($redis, 'ls:session', 1),
	'the lost lock is not brought back by renewals');

# a transaction-scoped lock removed from Redis: the commit fails with 40001
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:xact')");
$redis->cmd('DEL', 'ls:xact');
$s->query('\set VERBOSITY verbose');
$s->query('COMMIT');
like($s->{stderr},
	qr/ERROR:  40001: lock "ls:xact" was lost before the transaction committed/,
	'a lock removed while held fails the commit with 40001');
$s->{stderr} = '';
is($s->query_safe("SELECT rlock_held('ls:xact')"), '0',
	'and the transaction rolled back');

# an explicit lease that runs out before the commit: 40001 as well
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:short', '0', '300 ms')");
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'ls:short') == 0 }),
	'an explicit lease runs out while the transaction runs');
$s->query('COMMIT');
like($s->{stderr}, qr/40001: lock "ls:short" was lost/,
	'and the commit fails');
$s->{stderr} = '';

# without the check the commit goes through
$s->query_safe('BEGIN');
$s->query_safe('SET LOCAL rlock.verify_at_commit = off');
$s->query_safe("SELECT rlock_try('ls:off')");
$redis->cmd('DEL', 'ls:off');
$s->query('COMMIT');
is($s->{stderr}, '', 'with rlock.verify_at_commit off the commit succeeds');

# "on" (the default) asks Redis at every commit: a lock removed by hand
# (DEL, Redisson's forceUnlock) just before COMMIT fails it, however long
# its lease.  "lease" (a superuser's choice) trusts a lease Redis
# confirmed that outlasts the margin, and misses the removal.
is($s->query_safe('SHOW rlock.verify_at_commit'), 'on', 'the default is "on"');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:on', '0', '1 min')");
$redis->cmd('DEL', 'ls:on');
$s->query('COMMIT');
like($s->{stderr}, qr/40001: lock "ls:on" was lost/,
	'"on": a lock removed by hand under a long lease fails the commit');
$s->{stderr} = '';
# the check's script calls PTTL on a lock its owner holds, and so does a
# granting acquire (its read that client-side tracking follows,
# 068_client_tracking.pl): one call per acquire besides the checks
sub pttl_calls
{
	my ($n) = $redis->cmd('INFO', 'commandstats') =~ /cmdstat_pttl:calls=(\d+)/;
	return $n // 0;
}
my $checks = pttl_calls();
$s->query_safe('BEGIN');
# no client-side tracking: a window of 0 trusts none
$s->query_safe('SET LOCAL rlock.verify_window = 0');
$s->query_safe("SELECT rlock_try('ls:on2', '0', '1 min')");
$s->query_safe('COMMIT');
is(pttl_calls() - $checks, 2,
	'"on" without tracking: the commit asks Redis even of a lock it just granted');
$checks = pttl_calls();
$s->query_safe('BEGIN');
$s->query_safe('SET LOCAL rlock.verify_at_commit = lease');
$s->query_safe("SELECT rlock_try('ls:vouched', '0', '1 min')");
$redis->cmd('DEL', 'ls:vouched');
$s->query('COMMIT');
is($s->{stderr}, '',
	'"lease": a lock confirmed with a long lease commits without asking Redis');
is(pttl_calls() - $checks, 1, '"lease": no check was sent');

# What Redis confirmed on a connection since lost vouches for nothing: it
# may have restarted.  "lease" asks again.
$s->query_safe('BEGIN');
$s->query_safe('SET LOCAL rlock.verify_at_commit = lease');
$s->query_safe("SELECT rlock_try('ls:reconnected', '0', '1 min')");
my $old_conn = $redis->client_id('rlock_command');
$redis->cmd('CLIENT', 'KILL', 'ID', $old_conn);
ok( RlockTest::wait_until(
		sub {
			my $id = $redis->client_id('rlock_command');
			defined $id && $id != $old_conn;
		},
		10),
	'the worker connects again');
$redis->cmd('DEL', 'ls:reconnected');
$s->query('COMMIT');
like($s->{stderr}, qr/40001: lock "ls:reconnected" was lost/,
	'"lease" after a reconnection asks Redis and fails the commit');
$s->{stderr} = '';

# a loss in a rolled-back savepoint does not fail the commit
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:kept')");
$s->query_safe('SAVEPOINT a');
$s->query_safe("SELECT rlock_try('ls:sub')");
$redis->cmd('DEL', 'ls:sub');
ok( RlockTest::wait_until(
		sub { $s->query("SELECT rlock_held('ls:sub')") eq '0' }, 5),
	'a loss inside a savepoint is noticed');
like($s->{stderr}, qr/lock "ls:sub" was lost by the current transaction/,
	'with a warning that the commit will fail');
$s->{stderr} = '';
$s->query_safe('ROLLBACK TO SAVEPOINT a');
$s->query('COMMIT');
is($s->{stderr}, '', 'rolling the savepoint back takes the loss with it');
$s->quit;

# the check before the commit extends a short lease to rlock.verify_margin;
# seen while the commit waits for a synchronous standby that never comes
my $h = $node->background_psql('postgres', on_error_stop => 0);
my $hpid = $h->query_safe('SELECT pg_backend_pid()');
$h->query_safe("SET synchronous_commit = on");
$h->query_safe("SET rlock.verify_margin = '5s'");
$h->query_safe('BEGIN');
$h->query_safe("SELECT rlock_try('ls:margin', '0', '600 ms')");
$h->query_safe('CREATE TEMP TABLE w (x int)');	# something to commit
$h->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT wait_event FROM pg_stat_activity WHERE pid = $hpid") eq
			  'SyncRep';
		}),
	'a commit is held open after its check');
my $pttl = $redis->cmd('PTTL', 'ls:margin');
cmp_ok($pttl, '>', 3000, "the check extended the 600 ms lease to the margin ($pttl ms)");
$node->safe_psql('postgres', "SELECT pg_cancel_backend($hpid)");
$h->quit;
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'ls:margin') == 0 }),
	'and the lock went with the commit');

# Redis down at commit time: the commit fails with 58030
$s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:down')");
$redis->stop;
$s->query('COMMIT');
like($s->{stderr}, qr/ERROR:  58030/, 'a commit that cannot be checked fails with 58030');
$s->{stderr} = '';
$redis->restart;
ok(RlockTest::wait_for_redis($node, 5), 'Redis is back');

# an explicit lease hands the lock to a waiter within milliseconds of its end
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:handover', '0', '1 s')");
my $taken_at = time;
my $w = $node->background_psql('postgres');
$w->query_until(qr/waiting/,
	"\\echo waiting\nSELECT rlock_try('ls:handover', '10 s');\n");
like(scalar $w->query("SELECT 'next'"), qr/^t\n/, 'the waiter gets the lock');
my $after = time - $taken_at;
cmp_ok($after, '>=', 0.95, "not before the lease ended ($after s)");
cmp_ok($after, '<', 1.3, "and right after it ($after s)");
$w->quit;
$s->query('ROLLBACK');
$s->quit;

# fencing tokens grow across rlock and a Redisson-style fenced client
my $fenced = q{
if redis.call('exists', KEYS[1]) == 0
   or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return redis.call('incr', KEYS[2])
end
return -1
};
my @tokens;
for my $i (1 .. 3)
{
	push @tokens,
	  $node->safe_psql('postgres', "SELECT rlock_try_token('ls:fence')");
	# the statement's end queues the release; the worker sends it after
	RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'ls:fence') == 0 }, 5);
	push @tokens,
	  $redis->cmd('EVAL', $fenced, 2, 'ls:fence', 'redisson_lock_token:{ls:fence}',
		30000, "java-client:$i");
	$redis->cmd('DEL', 'ls:fence');
}
is_deeply(\@tokens, [ sort { $a <=> $b } @tokens ], "tokens only grow: @tokens");
is(scalar(keys %{ { map { $_ => 1 } @tokens } }), 6, 'and never repeat');
is($redis->cmd('GET', 'redisson_lock_token:{ls:fence}'), $tokens[-1],
	'they come from redisson_lock_token:{ls:fence}');

# rlock_force_release: Redisson's forceUnlock.  The lock goes whoever
# holds it, its waiter is woken and takes it, and the holding transaction
# learns at its commit (40001).
my ($rc, $out, $err);
$s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:force')");
$w = $node->background_psql('postgres');
$w->query_until(qr/waiting/,
	"\\echo waiting\nBEGIN;\nSELECT rlock_try('ls:force', '30 s');\n");
ok(RlockTest::wait_for_subscribers($redis, 'ls:force', 1), 'a session waits for it');
is($node->safe_psql('postgres', "SELECT rlock_force_release('ls:force')"), 't',
	'rlock_force_release removes a lock held by a transaction');
like(scalar $w->query("SELECT 'next'"), qr/^t\n/, 'its waiter is woken and takes it');
$s->query('COMMIT');
like($s->{stderr}, qr/ERROR:  lock "ls:force" was lost before the transaction committed/,
	'the holder learns it at its commit');
$s->{stderr} = '';
$w->query_safe('COMMIT');
is($node->safe_psql('postgres', "SELECT rlock_force_release('ls:force')"), 'f',
	'a free lock: false');
$redis->cmd('HSET', 'ls:force', 'java-client:7', 2);
$redis->cmd('PEXPIRE', 'ls:force', 60000);
is($node->safe_psql('postgres', "SELECT rlock_force_release('ls:force')"), 't',
	"a Redisson client's lock is removed too");
is($redis->cmd('EXISTS', 'ls:force'), 0, 'and gone from Redis');
$redis->cmd('SCRIPT', 'FLUSH');
$redis->cmd('HSET', 'ls:force', 'java-client:7', 1);
is($node->safe_psql('postgres', "SELECT rlock_force_release('ls:force')"), 't',
	'after SCRIPT FLUSH the script is loaded again');
$redis->cmd('SET', 'ls:force', 'app data');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT rlock_force_release('ls:force')");
like($err, qr/ERROR:  Redis returned an error for lock "ls:force"\nDETAIL:  WRONGTYPE the key holds a string, not a lock/,
	'a key that is not a lock: 58000, as for any lock function');
is($redis->cmd('GET', 'ls:force'), 'app data', 'and the key is left alone');
$redis->cmd('DEL', 'ls:force');

# forced from this instance, a transaction's lock is known lost at once,
# also where the check before commit trusts its last answer
$s->query_safe("SET rlock.verify_at_commit = lease");
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:force'), rlock_try('ls:force')");
is($node->safe_psql('postgres', "SELECT rlock_force_release('ls:force')"), 't',
	'a lock held twice is removed');
is($s->query("SELECT rlock_held('ls:force')"), '0',
	'its holder sees at once that it holds it no more');
like($s->{stderr}, qr/WARNING:  lock "ls:force" was lost by the current transaction/,
	'and is warned');
$s->{stderr} = '';
$s->query('COMMIT');
like($s->{stderr}, qr/ERROR:  lock "ls:force" was lost before the transaction committed/,
	'and its commit fails, with verify_at_commit = lease too');
$s->{stderr} = '';

# and with the check off: the worker knows of a forced release from this
# instance without asking Redis, and the commit fails all the same
$s->query_safe("SET rlock.verify_at_commit = off");
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:force')");
is($node->safe_psql('postgres', "SELECT rlock_force_release('ls:force')"), 't',
	'a lock removed while the check is off');
$s->query('COMMIT');
like($s->{stderr}, qr/ERROR:  lock "ls:force" was lost before the transaction committed/,
	'its commit fails with verify_at_commit = off too');
$s->{stderr} = '';
# a lock removed by hand is not known without asking: off commits
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ls:force')");
$redis->cmd('DEL', 'ls:force');
$s->query('COMMIT');
is($s->{stderr}, '', 'a removal by hand is what off does not see: the commit goes through');
$s->{stderr} = '';
$s->query_safe("RESET rlock.verify_at_commit");

$node->safe_psql('postgres', 'CREATE ROLE plain_user');
($rc, $out, $err) = $node->psql('postgres',
	"SET ROLE plain_user; SELECT rlock_force_release('ls:force')");
like($err, qr/permission denied for function rlock_force_release/,
	'not for every role');
$w->quit;
$s->quit;

done_testing();
