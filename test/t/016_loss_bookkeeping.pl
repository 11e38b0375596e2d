# Bookkeeping of lost locks: every way a session can learn of a loss
# (a renewal, a release, a re-entry, the check before commit) ends in the
# same place.  A lost transaction-scoped hold fails COMMIT and PREPARE
# unless the outermost subtransaction that held it rolls back; the loss
# goes with its transaction and never leaks into the next one; a failed
# commit leaves no shared entry behind, nor does an acquire Redis refuses;
# a release interrupted before Redis answered counts as a loss; a re-entry
# that finds someone else holding the lock drops the lost holds; a fencing
# token belongs to the hold that asked for it; a token counter Redis
# cannot increment leaves no lock behind.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'the bookkeeping of losses does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('loss', $redis,
	conf => [
		"rlock.watchdog_timeout = '1500ms'", "rlock.max_locks = 24",
		"max_prepared_transactions = 4"
	]);
$node->safe_psql('postgres', 'CREATE TABLE work (id int)');
my $worker = RlockTest::worker_pid($node);

my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');

# Run one statement, return its stderr and clear it
sub run
{
	my ($sql) = @_;
	$s->{stderr} = '';
	my $out = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return wantarray ? ($out, $err) : $err;
}

sub rows { $node->safe_psql('postgres', 'SELECT count(*) FROM work') }

# Wait until a renewal has found the key gone and the session took note
sub noticed
{
	my ($key) = @_;
	return RlockTest::wait_until(
		sub { $s->query("SELECT rlock_held('$key')") eq '0' }, 5);
}

sub lost_at_commit { my $k = shift; return qr/ERROR:  40001: lock "\Q$k\E" was lost before the transaction committed/ }

# -- the outermost holder decides ------------------------------------------

# held at top level and again in a savepoint: rolling the savepoint back
# does not undo the top-level work done under the lost lock
run('BEGIN');
run("SELECT rlock_try('lb:nest')");
run('INSERT INTO work VALUES (1)');
run('SAVEPOINT a');
run("SELECT rlock_try('lb:nest')");
$redis->cmd('DEL', 'lb:nest');
ok(noticed('lb:nest'), 'a lock held at two levels is found lost');
run('ROLLBACK TO SAVEPOINT a');
like(run('COMMIT'), lost_at_commit('lb:nest'),
	'rolling back the inner savepoint does not save the commit');
is(rows(), '0', 'and the top-level work is not committed');

# two losses, the first noticed inside a savepoint, the second at top
# level: the second is not forgotten when the savepoint rolls back
run('BEGIN');
run("SELECT rlock_try('lb:outer')");
run('INSERT INTO work VALUES (2)');
run('SAVEPOINT a');
run("SELECT rlock_try('lb:inner')");
$redis->cmd('DEL', 'lb:inner');
$redis->cmd('DEL', 'lb:outer');
ok(noticed('lb:inner') && noticed('lb:outer'), 'two locks are found lost');
run('ROLLBACK TO SAVEPOINT a');
like(run('COMMIT'), lost_at_commit('lb:outer'),
	'the loss of the outer lock still fails the commit');
is(rows(), '0', 'and its work is not committed');

# a loss inside a savepoint released into its parent stays with the parent
run('BEGIN');
run('SAVEPOINT a');
run("SELECT rlock_try('lb:released')");
run('INSERT INTO work VALUES (3)');
run('RELEASE SAVEPOINT a');
run('SAVEPOINT b');
$redis->cmd('DEL', 'lb:released');
ok(noticed('lb:released'), 'a lock taken in a released savepoint is lost');
run('ROLLBACK TO SAVEPOINT b');
like(run('COMMIT'), lost_at_commit('lb:released'),
	'and rolling back a later savepoint does not forget it');

# -- a release that finds the hold gone ------------------------------------

run('BEGIN');
run("SELECT rlock_try('lb:rel', '0', '200 ms')");
run('INSERT INTO work VALUES (4)');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'lb:rel') == 0 }),
	'a short lease runs out');
my ($out, $err) = run("SELECT rlock_release('lb:rel')");
is($out, 'f', 'releasing it returns false');
like($err, qr/lock "lb:rel" was no longer held in Redis.*\n.*\n.*HINT:  The transaction will fail at commit/s,
	'with a warning that the commit will fail');
like(run('COMMIT'), lost_at_commit('lb:rel'), 'and it does');
is(rows(), '0', 'nothing committed');

# the same key held in both scopes: a transaction-scoped release that
# finds nothing reports the session-scoped hold lost too
run("SELECT rlock_session_try('lb:both')");
run('BEGIN');
run("SELECT rlock_try('lb:both')");
$redis->cmd('DEL', 'lb:both');
($out, $err) = run("SELECT rlock_release('lb:both')");
is($out, 'f', 'a release on a key held in both scopes finds it gone');
like($err, qr/WARNING:  01000: session-scoped lock "lb:both" was lost/,
	'and the session-scoped hold is reported lost');
is($s->query("SELECT rlock_held('lb:both')"), '0', 'no hold is left');
like(run('COMMIT'), lost_at_commit('lb:both'), 'the commit fails');

# a session-scoped loss found by the check before commit is reported
run("SELECT rlock_session_try('lb:check')");
run('BEGIN');
run("SELECT rlock_try('lb:check')");
$redis->cmd('DEL', 'lb:check');
$err = run('COMMIT');
like($err, lost_at_commit('lb:check'), 'the check before commit finds the loss');
like($err, qr/WARNING:  01000: session-scoped lock "lb:check" was lost/,
	'and reports the session-scoped hold on the same key');
is($s->query("SELECT rlock_held('lb:check')"), '0', 'which is gone');

# a release interrupted before Redis answered, the error caught: whether
# the lock was still there is unknown, so the commit is refused
run('BEGIN');
run("SELECT rlock_try('lb:cancel', '0', '1 min')");
run('INSERT INTO work VALUES (7)');
$redis->cmd('DEL', 'lb:cancel');
$redis->freeze;
my $s_pid = $s->query_safe('SELECT pg_backend_pid()');
$s->{stderr} = '';
$s->query_until(qr/releasing/, q{\echo releasing
DO $$
BEGIN
	PERFORM rlock_release('lb:cancel');
EXCEPTION WHEN query_canceled THEN
	RAISE NOTICE 'release cancelled';
END $$;
});
my $canceller = $node->background_psql('postgres');
ok( RlockTest::wait_until(
		sub {
			$canceller->query_safe(
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $s_pid AND wait_event_type = 'Extension'"
			) eq '1';
		},
		5),
	'a release waits for a stopped Redis');
$canceller->query_safe("SELECT pg_cancel_backend($s_pid)");
$canceller->quit;
$s->query('SELECT 1');
like($s->{stderr}, qr/release cancelled/, 'it is cancelled and the error caught');
$redis->thaw;
like(run('COMMIT'), lost_at_commit('lb:cancel'),
	'the commit is refused, the lock being possibly lost');
is(rows(), '0', 'nothing committed');

# -- PREPARE TRANSACTION -------------------------------------------------

run('BEGIN');
run("SELECT rlock_try('lb:prep', '0', '200 ms')");
run('INSERT INTO work VALUES (5)');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'lb:prep') == 0 }),
	'a lock to be released before PREPARE runs out');
run("SELECT rlock_release('lb:prep')");
like(run("PREPARE TRANSACTION 'lb1'"), lost_at_commit('lb:prep'),
	'PREPARE TRANSACTION fails like a commit');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'),
	'0', 'nothing was prepared');

# with the check off Redis is not asked, but a loss rlock knows of (the
# release found the lease run out) fails PREPARE all the same, and does
# not leak into the session's next transaction
run('BEGIN');
run('SET LOCAL rlock.verify_at_commit = off');
run("SELECT rlock_try('lb:prep', '0', '200 ms')");
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'lb:prep') == 0 }),
	'the lease runs out again');
run("SELECT rlock_release('lb:prep')");
like(run("PREPARE TRANSACTION 'lb2'"), lost_at_commit('lb:prep'),
	'PREPARE with the check off fails on the loss the release found');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'),
	'0', 'nothing was prepared');
run('BEGIN');
run('INSERT INTO work VALUES (6)');
is(run('COMMIT'), '', 'the next transaction commits');
is(rows(), '1', 'with its work');

# -- failed commits leave no shared entries --------------------------------

my $all_40001 = 1;
for my $i (1 .. 40)
{
	run('BEGIN');
	run("SELECT rlock_try('lb:many:$i')");
	$redis->cmd('DEL', "lb:many:$i");
	my $e = run('COMMIT');
	$all_40001 = 0 unless $e =~ /ERROR:  40001/;
}
ok($all_40001, 'forty commits with a lost lock all fail with 40001');
my $other = $node->background_psql('postgres', on_error_stop => 0);
ok( RlockTest::wait_until(
		sub { $other->query("SELECT rlock_session_try('lb:after')") eq 't' },
		5),
	'and another session still finds an entry in a table of 24');
$other->query_safe("SELECT rlock_session_release('lb:after')");
$other->quit;

# acquires Redis refuses (here a user not allowed the keys) use up nothing
$redis->cmd('ACL', 'SETUSER', 'default', 'resetkeys', '~lb:*', '~redisson*');
my $refused = 0;
for my $i (1 .. 40)
{
	$refused++ if run("SELECT rlock_try('denied:$i')") =~ /ERROR:  58000/;
}
is($refused, 40, 'forty acquires refused by an ACL are errors (58000)');
is($s->query("SELECT rlock_try('lb:allowed')"), 't',
	'and an allowed key still finds an entry in a table of 24');
$redis->cmd('ACL', 'SETUSER', 'default', 'allkeys');

# -- a re-entry that finds someone else holding the lock -------------------

run("SELECT rlock_session_try('lb:re', '0', '300 ms')");
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'lb:re') == 0 }),
	'a session lock with a short lease runs out');
$redis->cmd('HSET', 'lb:re', 'another-client:1', '1');
$redis->cmd('PEXPIRE', 'lb:re', '60000');
($out, $err) = run("SELECT rlock_session_try('lb:re', '100 ms')");
is($out, 'f', 'taking it again fails: someone else has it');
like($err, qr/session-scoped lock "lb:re" was lost/, 'the old hold is reported lost');
is($s->query("SELECT rlock_held('lb:re')"), '0', 'and no longer counted');
is_deeply($redis->cmd('HKEYS', 'lb:re'), ['another-client:1'],
	"the other client's hold is untouched");
$redis->cmd('PEXPIRE', 'lb:re', '500');
is($s->query("SELECT rlock_session_try('lb:re', '5 s')"), 't',
	'once it is free the session takes it afresh');
is_deeply($redis->counts('lb:re'), ['1'], 'with a count of one in Redis');
is($s->query("SELECT rlock_session_release('lb:re')"), 't', 'and releases it');
is($redis->cmd('EXISTS', 'lb:re'), 0, 'which frees it');

# the same while waiting: the re-entry waits for the other holder and
# gets the lock once it leaves, with its old holds dropped
run("SELECT rlock_session_try('lb:rew', '0', '300 ms')");
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'lb:rew') == 0 }),
	'another short lease runs out');
$redis->cmd('HSET', 'lb:rew', 'another-client:1', '1');
$redis->cmd('PEXPIRE', 'lb:rew', '700');
($out, $err) = run("SELECT rlock_session_try('lb:rew', '10 s')");
is($out, 't', 'a re-entry that waits gets the lock when the other holder leaves');
like($err, qr/session-scoped lock "lb:rew" was lost/, 'reporting the old hold lost');
is($s->query("SELECT rlock_held('lb:rew')"), '1', 'the session counts one hold');
ok(RlockTest::wait_until(sub { join(',', @{ $redis->counts('lb:rew') }) eq '1' }),
	'and so does Redis');
run("SELECT rlock_session_release('lb:rew')");
is($redis->cmd('EXISTS', 'lb:rew'), 0, 'one release frees it');

# in transaction scope the commit fails
run('BEGIN');
run("SELECT rlock_try('lb:rex', '0', '300 ms')");
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'lb:rex') == 0 }),
	'a transaction lock with a short lease runs out');
$redis->cmd('HSET', 'lb:rex', 'another-client:1', '1');
$redis->cmd('PEXPIRE', 'lb:rex', '60000');
($out, $err) = run("SELECT rlock_try('lb:rex', '100 ms')");
is($out, 'f', 'a re-entry in the transaction fails');
like($err, qr/lock "lb:rex" was lost by the current transaction/, 'with a warning');
like(run('COMMIT'), lost_at_commit('lb:rex'), 'and the commit fails');
$redis->cmd('DEL', 'lb:rex');

# -- fencing tokens ----------------------------------------------------------

run("SELECT rlock_session_try_token('lb:tok')");
$redis->cmd('DEL', 'lb:tok');
($out, $err) = run("SELECT rlock_session_try('lb:tok')");
is($out, 't', 'a lost token-bearing lock is taken again without a token');
like($err, qr/session-scoped lock "lb:tok" was lost/, 'the loss is reported');
is($s->query("SELECT rlock_token('lb:tok') IS NULL"), 't',
	'and the old token is not reported for the new hold');
run("SELECT rlock_session_release('lb:tok')");

# a token counter Redis cannot increment: no lock is left behind
$redis->cmd('SET', 'redisson_lock_token:{lb:badtok}', 'not a number');
$err = run("SELECT rlock_session_try_token('lb:badtok')");
like($err, qr/ERROR:  58000/, 'a token counter that is not a number is an error');
is($redis->cmd('EXISTS', 'lb:badtok'), 0, 'and the lock is not taken');
is($s->query("SELECT rlock_held('lb:badtok')"), '0', 'nor counted');
is($s->query("SELECT rlock_session_try('lb:badtok')"), 't',
	'a re-entry on top of a plain hold');
run("SELECT rlock_session_try_token('lb:badtok')");
is_deeply($redis->counts('lb:badtok'), ['1'],
	'that fails on the counter leaves the count in Redis at one');
is($s->query("SELECT rlock_session_release('lb:badtok')"), 't',
	'so one release');
is($redis->cmd('EXISTS', 'lb:badtok'), 0, 'frees the lock');

$s->quit;
is(RlockTest::worker_pid($node), $worker, 'the worker ran throughout');
$node->stop;
$redis->stop;
done_testing();
