# A lock kind built for tests only (test/kinds/ticket, make
# RLOCK_TEST_KINDS=1) taken, waited for and released through the worker's
# one request path: its commands (an amount of twice the holds, its step),
# its channel and its free message wake a waiter, a release hands the
# lock to a local waiter, FORCE, HOLDER and the probe go to its scripts,
# rlock_locks names it, and one session holds one key as a ticket and as
# a plain lock at once, each its own hold.  Skipped by a build without
# the test kinds.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

plan skip_all => 'the test kind does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
# the watchdog's 30 s bound a waiter's timer: only a message wakes it here
my $node = RlockTest::node('testkind', $redis);

my ($rc, $out, $err) = $node->psql('postgres',
	"CREATE FUNCTION ticket_try(text, interval, boolean) RETURNS boolean
	   AS 'rlock', 'rlock_test_ticket_try' LANGUAGE C");
plan skip_all => 'rlock was built without RLOCK_TEST_KINDS=1' if $rc != 0;
$node->safe_psql('postgres', qq{
	CREATE FUNCTION ticket_release(text, boolean) RETURNS boolean
	  AS 'rlock', 'rlock_test_ticket_release' LANGUAGE C;
	CREATE FUNCTION ticket_held(text) RETURNS integer
	  AS 'rlock', 'rlock_test_ticket_held' LANGUAGE C;
	CREATE FUNCTION ticket_is_locked(text) RETURNS boolean
	  AS 'rlock', 'rlock_test_ticket_is_locked' LANGUAGE C;
	CREATE FUNCTION ticket_force(text) RETURNS boolean
	  AS 'rlock', 'rlock_test_ticket_force' LANGUAGE C;
	CREATE FUNCTION ticket_holder(text) RETURNS text
	  AS 'rlock', 'rlock_test_ticket_holder' LANGUAGE C;
	CREATE FUNCTION ticket_take(text, integer, boolean) RETURNS boolean
	  AS 'rlock', 'rlock_test_ticket_take' LANGUAGE C;
	CREATE FUNCTION ticket_give(text, integer, boolean) RETURNS boolean
	  AS 'rlock', 'rlock_test_ticket_give' LANGUAGE C;
});

my $obs = $node->background_psql('postgres');
sub look { return $obs->query_safe(shift) }
sub ticket { return $redis->cmd('GET', 'rlock_ticket_lock:{' . shift() . '}') // '' }

my $s1 = $node->background_psql('postgres', on_error_stop => 0);
my $s2 = $node->background_psql('postgres', on_error_stop => 0);

# -- taken, re-entered, shown -----------------------------------------------

is($s1->query_safe("SELECT ticket_try('tk:a', '0', true)"), 't',
	'a ticket is taken');
my $owner = look("SELECT owner FROM rlock_locks WHERE key = 'tk:a'");
is(ticket('tk:a'), "$owner 2", 'Redis holds its amount, one step (2)');
is($s1->query_safe("SELECT ticket_try('tk:a', '0', true)"), 't',
	'and re-entered');
is(ticket('tk:a'), "$owner 4", 'Redis holds two steps: the amount to leave');
is(look("SELECT concat_ws(' ', kind, scope, count, state) FROM rlock_locks WHERE key = 'tk:a'"),
	'ticket session 2 held', 'rlock_locks names the kind');
is($s1->query_safe("SELECT ticket_held('tk:a')"), '2', 'the session counts two holds');

# -- one key, two kinds: two holds --------------------------------------------

is($s1->query_safe("SELECT rlock_session_try('tk:a')"), 't',
	'the same session takes the key as a plain lock too');
is(look("SELECT string_agg(kind || ' ' || count, ', ' ORDER BY kind) FROM rlock_locks WHERE key = 'tk:a'"),
	'plain 1, ticket 2', 'two holds, one per kind');
is(look('SELECT locks_in_use FROM rlock_status()'), '2', 'two shared entries');
is($s1->query_safe("SELECT rlock_held('tk:a')"), '1', 'the plain lock counts its own');
is($s1->query_safe("SELECT rlock_session_release('tk:a')"), 't',
	'the plain lock is released');
is(ticket('tk:a'), "$owner 4", 'the ticket is untouched');

# -- waiting: the kind's channel and its message ------------------------------

is($s2->query_safe("SELECT ticket_try('tk:a', '0', true)"), 'f',
	'another session is refused');
$s2->query_until(qr/start/, "\\echo start\nSELECT ticket_try('tk:a', '30 s', true);\n");
ok(RlockTest::waiting_in_sql($node, 'tk:a'), 'and waits for it');
ok( RlockTest::wait_until(
		sub { $redis->cmd('PUBSUB', 'NUMSUB', 'rlock_ticket:{tk:a}')->[1] == 1 }, 10),
	'on the kind\'s channel');
is($redis->cmd('PUBSUB', 'NUMSUB', 'redisson_lock__channel:{tk:a}')->[1], 0,
	'not on the plain kind\'s');
is($s1->query_safe("SELECT ticket_release('tk:a', true)"), 't', 'one hold given back');
is(ticket('tk:a'), "$owner 2", 'leaving one step in Redis');
is($s1->query_safe("SELECT ticket_release('tk:a', true)"), 't', 'the last one too');
ok(RlockTest::wait_until(sub { look("SELECT count(*) FROM rlock_locks WHERE key = 'tk:a' AND state = 'held'") == 1 }, 10),
	'the waiter is handed the ticket');
my $owner2 = look("SELECT owner FROM rlock_locks WHERE key = 'tk:a' AND state = 'held'");
isnt($owner2, $owner, 'the other session holds it');
is(ticket('tk:a'), "$owner2 2", 'Redis says so');
$s2->query_safe("SELECT 1");

# -- a free message from elsewhere wakes the waiter ---------------------------

$s1->query_until(qr/start/, "\\echo start\nSELECT ticket_try('tk:a', '30 s', true);\n");
ok(RlockTest::waiting_in_sql($node, 'tk:a'), 'the first session now waits');
ok( RlockTest::wait_until(
		sub { $redis->cmd('PUBSUB', 'NUMSUB', 'rlock_ticket:{tk:a}')->[1] == 1 }, 10),
	'subscribed');
# the holder's key goes away behind rlock's back; only the kind's free
# message tells the waiter
$redis->cmd('DEL', 'rlock_ticket_lock:{tk:a}');
$redis->cmd('PUBLISH', 'rlock_ticket:{tk:a}', 'nothing');
ok(!RlockTest::wait_until(sub { ticket('tk:a') ne '' }, 2),
	'a message the kind does not know wakes nobody');
$redis->cmd('PUBLISH', 'rlock_ticket:{tk:a}', 'free');
ok(RlockTest::wait_until(sub { ticket('tk:a') eq "$owner 2" }, 5),
	'its free message does: the waiter takes the ticket');
$s1->query_safe("SELECT 1");

# -- HOLDER, the probe, FORCE through the kind --------------------------------

like(look("SELECT ticket_holder('tk:a')"), qr/^\Q$owner\E\|2\|\|\|1$/,
	'the holder as the kind reads it');
is(look("SELECT ticket_is_locked('tk:a')"), 't', 'the kind\'s probe sees it');
is(look("SELECT rlock_is_locked('tk:a')"), 'f', 'the plain kind\'s does not');
is(look("SELECT ticket_force('tk:a')"), 't', 'a forced release through the kind');
is(ticket('tk:a'), '', 'removes the ticket');
is(look("SELECT ticket_holder('tk:a')"), '', 'free');
ok( RlockTest::wait_until(
		sub {
			look("SELECT state FROM rlock_locks WHERE key = 'tk:a' AND owner = '$owner'")
			  eq 'lost';
		},
		10),
	'and the holder\'s hold is lost');
is($s1->query_safe("SELECT ticket_release('tk:a', true)"), 'f',
	'its release finds nothing in Redis');

# -- a forced release of one kind leaves the other kind's hold alone ---------

is($s2->query_safe("SELECT ticket_try('tk:f', '0', true)"), 't',
	'a ticket of tk:f is taken');
is($s2->query_safe("SELECT rlock_session_try('tk:f')"), 't',
	'and a plain lock of tk:f');
is(look("SELECT ticket_force('tk:f')"), 't', 'the ticket is forced away');
ok( RlockTest::wait_until(
		sub {
			look("SELECT state FROM rlock_locks WHERE key = 'tk:f' AND kind = 'ticket'")
			  eq 'lost';
		},
		10),
	'the ticket hold is lost');
# the plain lock is still in Redis: its hold is not lost
is($redis->cmd('HEXISTS', 'tk:f', look("SELECT owner FROM rlock_locks WHERE key = 'tk:f' AND kind = 'plain'")), 1,
	'Redis still has the plain lock');
is(look("SELECT state FROM rlock_locks WHERE key = 'tk:f' AND kind = 'plain'"), 'held',
	'the plain hold of the key is not marked lost');
is($s2->query_safe("SELECT rlock_session_release('tk:f')"), 't',
	'the plain lock is released, held');
is($s2->query_safe("SELECT ticket_release('tk:f', true)"), 'f',
	'the ticket finds nothing in Redis');
# -- holds of an amount (as a semaphore's permits) ------------------------------

{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	is($s->query_safe("SELECT ticket_take('tk:n', 3, true)"), 't', 'a hold of amount 3');
	my $o = look("SELECT owner FROM rlock_locks WHERE key = 'tk:n'");
	is(ticket('tk:n'), "$o 6", 'Redis holds 3 steps');
	$s->query_safe("BEGIN; SELECT ticket_take('tk:n', 2, false)");
	is(ticket('tk:n'), "$o 10", 'one of 2 more, in a transaction: 5 steps');
	is(look("SELECT string_agg(scope || ' ' || count, ',' ORDER BY scope) FROM rlock_locks WHERE key = 'tk:n'"),
		'session 3,transaction 2', 'rlock_locks counts each scope\'s amount');
	$s->query_safe("SAVEPOINT p; SELECT ticket_take('tk:n', 4, false)");
	is(ticket('tk:n'), "$o 18", 'and 4 in a savepoint: 9 steps');
	$s->query_safe('ROLLBACK TO SAVEPOINT p; SELECT 1');
	ok(RlockTest::wait_until(sub { ticket('tk:n') eq "$o 10" }, 5),
		'the rolled back savepoint gives back its 4');
	$s->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { ticket('tk:n') eq "$o 6" }, 5),
		'the commit its 2');
	is($s->query_safe("SELECT ticket_give('tk:n', 2, true)"), 't', '2 of the session\'s 3 given back');
	is(ticket('tk:n'), "$o 2", 'one step left');
	is($s->query_safe("SELECT ticket_held('tk:n')"), '1', 'the session counts 1');
	is($s->query_safe("SELECT ticket_give('tk:n', 1, true)"), 't', 'the last one');
	is(ticket('tk:n'), '', 'the ticket is gone');
	$s->quit;
}

$s2->quit;
$s1->quit;
ok(RlockTest::wait_until(sub { look('SELECT locks_in_use FROM rlock_status()') == 0 }, 10),
	'every entry is free at the end');

$obs->quit;
$node->stop;
done_testing();
