# What an operator sees: a waiting session in rlock_locks ("waiting", with
# its key and wait start), in pg_stat_activity (wait event Extension) and
# in its process title ("waiting for rlock"); a lost lock shown as lost
# before its session notices; the counters of refused, timed-out and
# cancelled acquires, of losses, unlock messages and reconnections; and
# rlock_status() following Redis down and back.  A waiter on a Redis that
# stops answering (SIGSTOP) ends with 58030 within its deadlines, found
# by the worker's keepalive even though nothing else is sent.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'the views do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('obs', $redis,
	connect_timeout => '1s',
	command_timeout => '1s',
	conf => ["rlock.watchdog_timeout = '1500ms'"]);

my $observer = $node->background_psql('postgres');
sub observe { return $observer->query_safe(shift) }
sub counter { return observe("SELECT $_[0] FROM rlock_stats") }

observe('SELECT rlock_stats_reset()');

# -- a waiter, seen three ways ----------------------------------------------

my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT rlock_session_try('obs:k')");
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
my $waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nBEGIN;\nSELECT rlock_lock('obs:k');\nCOMMIT;\n");

ok( RlockTest::wait_until(
		sub {
			observe(
				"SELECT count(*) FROM rlock_locks WHERE pid = $waiter_pid AND state = 'waiting'"
			) eq '1';
		},
		10),
	'the waiter is shown as waiting in rlock_locks');
is( observe(
		"SELECT key || ' ' || scope || ' ' || (wait_started <= now()) || ' ' || (wait_until IS NULL)
		   FROM rlock_locks WHERE pid = $waiter_pid"),
	'obs:k transaction true true',
	'with its key, scope, wait start and no deadline');
# PostgreSQL 17 lets an extension name its wait events
my $named = observe('SELECT current_setting(\'server_version_num\')::int >= 170000') eq 't';
is( observe(
		"SELECT wait_event_type || ':' || wait_event FROM pg_stat_activity WHERE pid = $waiter_pid"),
	$named ? 'Extension:Rlock' : 'Extension:Extension',
	'pg_stat_activity shows it waiting on rlock');
# (the worker waits nearly always; it may be busy at one look)
ok( RlockTest::wait_until(
		sub {
			observe("SELECT wait_event_type || ':' || wait_event FROM pg_stat_activity WHERE backend_type = 'rlock worker'")
			  eq ($named ? 'Extension:RlockWorkerMain' : 'Extension:Extension');
		},
		10),
	'and the worker waiting for work');
SKIP:
{
	skip 'no /proc', 1 unless -r "/proc/$waiter_pid/cmdline";
	ok( RlockTest::wait_until(
			sub {
				open(my $fh, '<', "/proc/$waiter_pid/cmdline") or return 0;
				local $/;
				my $title = <$fh>;
				return $title =~ /waiting for rlock/;
			},
			5),
		'its process title says "waiting for rlock"');
}
is(observe('SELECT waiting::text || subscribed_channels FROM rlock_status()'),
	'11', 'rlock_status counts one waiting request and one channel');
my $holder_row = observe(
	"SELECT scope || ' ' || count || ' ' || state FROM rlock_locks WHERE key = 'obs:k' AND state <> 'waiting'");
is($holder_row, 'session 1 held', 'the holder is shown holding');

# the holder lets go: the waiter gets it, and its title is restored
$holder->query_safe("SELECT rlock_session_release('obs:k')");
$waiter->query_safe('SELECT 1');
ok( RlockTest::wait_until(
		sub {
			observe("SELECT count(*) FROM rlock_locks WHERE pid = $waiter_pid") eq '0';
		},
		5),
	'the waiter got the lock and released it at the end of its statement');
SKIP:
{
	skip 'no /proc', 1 unless -r "/proc/$waiter_pid/cmdline";
	open(my $fh, '<', "/proc/$waiter_pid/cmdline");
	local $/;
	my $title = <$fh>;
	unlike($title, qr/waiting for rlock/, 'and its process title is back');
}

# -- refused, timed out, cancelled ------------------------------------------

$holder->query_safe("SELECT rlock_session_try('obs:busy')");
my $before = counter('refused || \' \' || timed_out || \' \' || cancelled');
$waiter->query_safe("SELECT rlock_try('obs:busy')");
$waiter->query_safe("SELECT rlock_try('obs:busy', '50 ms')");
$waiter->query("SET lock_timeout = '50ms'; SELECT rlock_lock('obs:busy'); RESET lock_timeout");
$waiter->query("SET statement_timeout = '50ms'; SELECT rlock_lock('obs:busy'); RESET statement_timeout");
$waiter->{stderr} = '';
my ($r0, $t0, $c0) = split / /, $before;
is(counter('refused || \' \' || timed_out || \' \' || cancelled'),
	($r0 + 1) . ' ' . ($t0 + 2) . ' ' . ($c0 + 1),
	'one refused, two timed out (wait, lock_timeout), one cancelled (statement_timeout)');
$holder->query_safe("SELECT rlock_session_release('obs:busy')");

# -- a lost lock is shown lost before its session looks -------------------

my $lost_before = counter('lost');
$holder->query_safe("SELECT rlock_session_try('obs:lost')");
my $expires = observe(
	"SELECT expires_at > now() AND expires_at <= clock_timestamp() + interval '1500 ms' FROM rlock_locks WHERE key = 'obs:lost'");
is($expires, 't', 'expires_at is within one watchdog lease');
$redis->cmd('DEL', 'obs:lost');
ok( RlockTest::wait_until(
		sub {
			observe("SELECT state FROM rlock_locks WHERE key = 'obs:lost'") eq 'lost';
		},
		5),
	'a lock removed from Redis is shown lost after the next renewal');
is(counter('lost'), $lost_before + 1, 'and counted once');
$holder->query("SELECT rlock_held('obs:lost')");
$holder->{stderr} = '';
is(observe("SELECT count(*) FROM rlock_locks WHERE key = 'obs:lost' AND state <> 'releasing'"),
	'0', 'once the session took note, the row is gone');

# -- an explicit lease, and an unlock message from another client -----------

$holder->query_safe("SELECT rlock_session_try('obs:lease', '0', '20 s')");
is( observe(
		"SELECT lease || ' ' || watchdog || ' ' || (expires_at BETWEEN now() + interval '15 s' AND clock_timestamp() + interval '20 s') FROM rlock_locks WHERE key = 'obs:lease'"
	),
	'00:00:20 false true',
	'an explicit lease is shown with its end');
$holder->query_safe("SELECT rlock_session_release('obs:lease')");

my $messages = counter('unlock_messages');
$redis->cmd('HSET', 'obs:other', 'other:1', '1');
$redis->cmd('PEXPIRE', 'obs:other', '60000');
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nBEGIN;\nSELECT rlock_try('obs:other', '30 s');\nCOMMIT;\n");
ok(RlockTest::wait_for_subscribers($redis, 'obs:other', 1, 10),
	'a waiter on another client\'s lock subscribes');
$redis->cmd('DEL', 'obs:other');
$redis->cmd('PUBLISH', 'redisson_lock__channel:{obs:other}', '0');
$waiter->query_safe('SELECT 1');
cmp_ok(counter('unlock_messages'), '>', $messages, 'the unlock message is counted');

# -- Redis down and back ----------------------------------------------------

my $reconnects = counter('reconnects');
$redis->stop;
ok( RlockTest::wait_until(
		sub {
			observe('SELECT command_connection FROM rlock_status()') ne 'ready';
		},
		10),
	'with Redis stopped, the command connection is not ready');
like(observe('SELECT last_error FROM rlock_status()'), qr/\S/,
	'and the last error says why');
$redis->restart;
ok( RlockTest::wait_until(
		sub {
			observe(
				"SELECT command_connection || subscriber_connection FROM rlock_status()"
			) eq 'readyready';
		},
		10),
	'Redis back: both connections ready again');
cmp_ok(counter('reconnects'), '>=', $reconnects + 2, 'two reconnections counted');
is(observe('SELECT redis_role FROM rlock_status()'), 'master',
	'the role of the server is known again');

# -- a waiter on a Redis that stops answering --------------------------------

$redis->cmd('HSET', 'obs:frozen', 'other:1', '1');
$redis->cmd('PEXPIRE', 'obs:frozen', '60000');
$waiter->{stderr} = '';
$waiter->query_until(qr/waiting/,
	"\\echo waiting\n\\set VERBOSITY verbose\nSELECT rlock_lock('obs:frozen');\n");
ok(RlockTest::wait_for_subscribers($redis, 'obs:frozen', 1, 10),
	'a waiter sleeps on a lock with a minute of TTL');
my $frozen_at = time;
$redis->freeze;
$waiter->query('SELECT 1');
my $took = time - $frozen_at;
$redis->thaw;
like($waiter->{stderr}, qr/ERROR:  58030/, 'Redis stopped: the waiter fails with 58030');
# keepalive interval (0.5 s) + command_timeout (1 s) + connect_timeout (1 s)
cmp_ok($took, '<', 2.5 + 1.5, "within the worker's deadlines ($took s)");
ok(RlockTest::wait_for_redis($node, 10), 'service resumes after the thaw');

# -- a release on its way: the count that will remain ----------------------

# Redis takes no writes for a while: the release at commit is sent and
# not answered (the check before commit is off, so the commit does not
# wait)
$holder->query_safe("SET rlock.verify_at_commit = off");
$holder->query_safe("BEGIN; SELECT rlock_try('obs:rel'); SELECT rlock_try('obs:rel');");
$redis->cmd('CLIENT', 'PAUSE', 3000, 'WRITE');
$holder->query_safe('COMMIT');
is(observe("SELECT state || ' ' || count || ' ' || (scope IS NULL) FROM rlock_locks WHERE key = 'obs:rel'"),
	'releasing 0 true',
	'a release on its way: a releasing row with the count that will remain');
is(scalar @{ $redis->owners('obs:rel') }, 1, 'while Redis still has the lock');
$redis->cmd('CLIENT', 'UNPAUSE');
ok( RlockTest::wait_until(
		sub {
			observe("SELECT count(*) FROM rlock_locks WHERE key = 'obs:rel'") == 0
			  && $redis->cmd('EXISTS', 'obs:rel') == 0;
		},
		10),
	'once Redis takes the release, the row is gone and so is the lock');
$holder->query_safe("RESET rlock.verify_at_commit");

# -- keys another database's encoding cannot show ----------------------------

# a session of a UTF-8 database holds a Japanese key, a key with an accent
# and one with a backslash; a LATIN1 database shows what LATIN1 can and
# escapes the rest, instead of failing the view
$node->safe_psql('postgres',
	"CREATE DATABASE lat1 TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'");
$node->safe_psql('lat1', 'CREATE EXTENSION rlock');
$holder->query_safe(
	q{SELECT rlock_session_try(chr(26085) || chr(26412)), rlock_session_try('caf' || chr(233)), rlock_session_try(E'a\\\\b' || chr(128274))}
);
my ($rc, $keys, $err) = $node->psql('lat1',
	q{SELECT string_agg(CASE WHEN key = 'caf' || chr(233) THEN 'cafe, converted' ELSE key END, ' ' ORDER BY key) FROM rlock_locks WHERE key NOT LIKE 'obs:%'},
	extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
is($rc, 0, 'rlock_locks works in a LATIN1 database') or diag($err);
is($keys, q{\u65E5\u672C a\\\\b\U0001F512 cafe, converted},
	'keys it cannot show are escaped, the others converted');
# keys are the instance's, not the database's: the same key taken from
# the LATIN1 database (converted to UTF-8 for Redis) is the same lock
is($node->safe_psql('lat1', q{SELECT rlock_try('caf' || chr(233))}), 'f',
	'another database finds the same key held: keys are shared by every database');
$holder->query_safe('SELECT rlock_release_all()');
# and so is a prefix: set in LATIN1, it goes to Redis in UTF-8, and the
# views take it off again
my $lat = $node->background_psql('lat1');
$lat->query_safe(q{SET rlock.key_prefix = E'p\\xe9:'});
$lat->query_safe(q{SELECT rlock_session_try('pk')});
is($redis->cmd('EXISTS', "p\xc3\xa9:pk"), 1,
	'a prefix set in a LATIN1 database reaches Redis in UTF-8');
is($lat->query_safe(
		'SELECT key FROM rlock_locks WHERE pid = pg_backend_pid()'),
	'pk', 'and the views show the key without it');
$lat->quit;

$holder->quit;
$waiter->quit;
$observer->quit;
$node->stop;
$redis->stop;
done_testing();
