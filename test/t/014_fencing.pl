# A fencing token in a version column guards a write: a holder paused past
# its lease (SIGSTOP of its backend) comes back after another session took
# the lock and wrote; its late write is rejected by the fence, and its
# commit is refused (40001).  No update is lost.  The token counter
# outlives the lock.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'fencing tokens do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('fencing', $redis);
$node->safe_psql('postgres', q{
	CREATE TABLE account (id int PRIMARY KEY, balance int, fence bigint);
	INSERT INTO account VALUES (1, 100, 0);
});

# A takes the lock with a short lease and reads the balance
my $a = $node->background_psql('postgres', on_error_stop => 0);
$a->query_safe('\set VERBOSITY verbose');
my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
$a->query_safe('BEGIN');
my $a_token = $a->query_safe("SELECT rlock_try_token('acct:1', '0', '500 ms')");
my $a_balance = $a->query_safe('SELECT balance FROM account WHERE id = 1');
is($a_balance, '100', 'A holds the lock (token ' . $a_token . ') and reads 100');

# A stalls past its lease
kill 'STOP', $a_pid;
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'acct:1') == 0 }, 5),
	"A's lease runs out while it is stopped");

# B takes the lock and writes, fenced
my $b = $node->background_psql('postgres');
$b->query_safe('BEGIN');
my $b_token = $b->query_safe("SELECT rlock_try_token('acct:1', '5 s')");
cmp_ok($b_token, '>', $a_token, "B gets the lock with a larger token ($b_token)");
$b->query_safe(q{
	UPDATE account SET balance = balance + 10, fence = rlock_token('acct:1')
	WHERE id = 1 AND fence < rlock_token('acct:1')});
$b->query_safe('COMMIT');
$b->quit;
is($node->safe_psql('postgres', 'SELECT balance FROM account WHERE id = 1'),
	'110', "B's update is in");

# A comes back and writes what it computed from its stale read
kill 'CONT', $a_pid;
my $updated = $a->query_safe(sprintf(q{
	WITH u AS (
		UPDATE account SET balance = %d, fence = rlock_token('acct:1')
		WHERE id = 1 AND fence < rlock_token('acct:1')
		RETURNING 1)
	SELECT count(*) FROM u}, $a_balance - 30));
is($updated, '0', "A's late write is rejected by the fence");
$a->query('COMMIT');
like($a->{stderr}, qr/ERROR:  40001: lock "acct:1" was lost before the transaction committed/,
	"and A's commit is refused");
$a->quit;

is( $node->safe_psql('postgres', 'SELECT balance, fence FROM account WHERE id = 1'),
	"110|$b_token",
	'no update was lost: the balance and fence are those B wrote');

# the counter outlives the lock: it has no expiry, so a later holder's
# token stays larger than every fence already written
is($redis->cmd('EXISTS', 'acct:1'), 0, 'the lock is gone');
is($redis->cmd('PTTL', 'redisson_lock_token:{acct:1}'), -1,
	'its token counter stays, without expiry');
is($redis->cmd('GET', 'redisson_lock_token:{acct:1}'), $b_token,
	'holding the last token handed out');

# a counter some client set below zero hands out no token: the grant is
# undone and the call fails with 58000 saying why, the connection and the
# other sessions untouched
$redis->cmd('SET', 'redisson_lock_token:{fence:neg}', -5);
my ($rc, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT rlock_session_try_token('fence:neg')");
like($err, qr/ERROR:  58000: Redis returned an error for lock "fence:neg"\n.*DETAIL:  The fencing token counter of the lock gave -4, and a token must be 1 or more/s,
	'a token below 1: 58000 with the reason');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'fence:neg') == 0 }, 5),
	'and the grant was undone');
is($node->safe_psql('postgres',
		"SELECT rlock_session_try_token('fence:other') > 0, rlock_release_all()"),
	't|1', 'other locks and tokens work on');

done_testing();
