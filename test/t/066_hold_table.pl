# The transitions of the shared hold table (src/shared/holdtable.c),
# driven through the SQL functions and read back in rlock_locks,
# rlock_status() and Redis: an entry allocated and granted, re-entered in
# both scopes on the one entry, a release of each scope, the transaction's
# holds ended by its commit, a refused session's entry freed, a waiter
# handed the lock, a release and an acquire held on the wire by a paused
# Redis ("releasing", "acquiring"), the entries a new worker recovers, and
# losses marked by a forced release and by the watchdog.  Every entry is
# freed at the end.  And the session's holds live in a memory context of
# their own, "rlock session", made on first use.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

plan skip_all => 'the hold table does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('holdtab', $redis,
	command_timeout => '5s',
	conf => ["rlock.watchdog_timeout = '3s'"]);

my $obs = $node->background_psql('postgres');
sub look { return $obs->query_safe(shift) }

# the rows of rlock_locks for a key: "scope count state", by scope
sub rows
{
	my ($key) = @_;
	return look(
		"SELECT coalesce(string_agg(concat_ws(' ', scope, count, state), ', '
		                            ORDER BY scope NULLS FIRST), '')
		   FROM rlock_locks WHERE key = '$key'");
}
sub in_use { return look('SELECT locks_in_use FROM rlock_status()') }
sub wait_rows
{
	my ($key, $want) = @_;
	return RlockTest::wait_until(sub { rows($key) eq $want }, 10);
}
sub wait_in_use
{
	my ($want) = @_;
	return RlockTest::wait_until(sub { in_use() == $want }, 10);
}
sub redis_count
{
	my ($key, $owner) = @_;
	return $redis->holds($key)->{$owner} // 0;
}

# -- the session's memory context -------------------------------------------

my $s = $node->background_psql('postgres', on_error_stop => 0);
is( $s->query_safe(
		"SELECT count(*) FROM pg_backend_memory_contexts WHERE name = 'rlock session'"),
	'0', 'a session that took no lock has no "rlock session" context');

# -- alloc, acquire_begin, grant --------------------------------------------

is($s->query_safe("BEGIN; SELECT rlock_try('ht:a')"), 't', 'a lock is taken');
is(rows('ht:a'), 'transaction 1 held', 'its entry is held in transaction scope');
is(in_use(), '1', 'one entry is in use');
is(look("SELECT expires_at > now() FROM rlock_locks WHERE key = 'ht:a'"),
	't', 'with the lease end the grant confirmed');
my $owner = look("SELECT owner FROM rlock_locks WHERE key = 'ht:a'");
is(redis_count('ht:a', $owner), 1, 'Redis holds one for its owner');

# a context's parent: PostgreSQL 18 replaced the parent column by the
# path of transient ids from TopMemoryContext down to the context
my $parent_of = $node->safe_psql('postgres', 'SHOW server_version_num') >= 180000
  ? "SELECT p.name FROM pg_backend_memory_contexts c JOIN pg_backend_memory_contexts p
	   ON p.path[cardinality(p.path)] = c.path[cardinality(c.path) - 1] WHERE c.name = '%s'"
  : "SELECT parent FROM pg_backend_memory_contexts WHERE name = '%s'";
is($s->query_safe(sprintf($parent_of, 'rlock session')),
	'TopMemoryContext',
	'the session has an "rlock session" context, a child of TopMemoryContext');
is($s->query_safe(sprintf($parent_of, 'rlock holds')),
	'rlock session', 'which holds the table of its holds');

# -- the one entry re-entered in both scopes (publish) ----------------------

$s->query_safe("SELECT rlock_try('ht:a'), rlock_session_try('ht:a')");
is(rows('ht:a'), 'session 1 held, transaction 2 held',
	're-entered in both scopes: the counts by scope');
is(in_use(), '1', 'on the one entry');
is(redis_count('ht:a', $owner), 3, 'Redis holds three');

# -- a release (queue_release, dequeue, released) ---------------------------

is($s->query_safe("SELECT rlock_release('ht:a')"), 't',
	'one transaction-scoped hold released');
is(rows('ht:a'), 'session 1 held, transaction 1 held', 'the entry says so');
is(redis_count('ht:a', $owner), 2, 'and Redis, once answered');

# -- the commit ends the transaction's holds --------------------------------

$s->query_safe('COMMIT');
ok(RlockTest::wait_until(sub { redis_count('ht:a', $owner) == 1 }, 10),
	"the commit gives the transaction's hold back");
is(rows('ht:a'), 'session 1 held', 'the session-scoped one stays');

# -- refuse: another session's entry is freed -------------------------------

my $o = $node->background_psql('postgres', on_error_stop => 0);
my $o_pid = $o->query_safe('SELECT pg_backend_pid()');
is($o->query_safe("SELECT rlock_session_try('ht:a')"), 'f',
	'another session is refused');
ok(wait_in_use(1), "the refused session's entry is freed");
is(rows('ht:a'), 'session 1 held', 'and it shows nothing');

# -- a waiter is handed the lock --------------------------------------------

$o->query_until(qr/waiting/,
	"\\echo waiting\nSELECT rlock_session_lock('ht:a');\n\\echo locked\n");
ok(RlockTest::waiting_in_sql($node, 'ht:a'), 'a waiter shows as waiting');
is(in_use(), '2', 'with an entry of its own, pinned while it waits');
is($s->query_safe("SELECT rlock_session_release('ht:a')"), 't',
	'the holder releases');
$o->query_until(qr/locked/, '');
ok(wait_rows('ht:a', 'session 1 held'), 'the lock is held once more');
is(look("SELECT pid FROM rlock_locks WHERE key = 'ht:a'"), $o_pid,
	'by the waiter');
ok(wait_in_use(1), "the first holder's entry is freed");

# -- a forced release marks the holder's entry lost (lose) ------------------

is(look("SELECT rlock_force_release('ht:a')"), 't', 'the lock is forced away');
is(rows('ht:a'), 'session 1 lost', "the holder's entry is marked lost at once");
my ($out, $ret) = $o->query("SELECT rlock_held('ht:a')");
is($out, '0', 'the holder finds it holds nothing');
like($o->{stderr}, qr/WARNING:  session-scoped lock "ht:a" was lost/,
	'with a warning');
$o->{stderr} = '';
ok(wait_in_use(0), 'and its entry is freed');
is(rows('ht:a'), '', 'nothing is shown');

# -- on the wire: "releasing" and "acquiring" -------------------------------

$s->query_safe("SELECT rlock_session_try('ht:b')");
my $owner_s = look("SELECT owner FROM rlock_locks WHERE key = 'ht:b'");
$redis->cmd('CLIENT', 'PAUSE', '20000', 'WRITE');
$s->query_until(qr/releasing/,
	"\\echo releasing\nSELECT rlock_session_release('ht:b');\n\\echo released\n");
ok(wait_rows('ht:b', '0 releasing'),
	'a release Redis has not answered shows as releasing');
$o->query_until(qr/acquiring/,
	"\\echo acquiring\nSELECT rlock_session_try('ht:c');\n\\echo acquired\n");
ok(wait_rows('ht:c', 'session acquiring'),
	'an acquire on the wire shows as acquiring');
is(in_use(), '2', 'each on an entry');
$redis->cmd('CLIENT', 'UNPAUSE');
$s->query_until(qr/released/, '');
$o->query_until(qr/acquired/, '');
ok(wait_rows('ht:b', ''), 'once answered, the release is done');
is(redis_count('ht:b', $owner_s), 0, 'in Redis too');
is(rows('ht:c'), 'session 1 held', 'and the acquire granted');
ok(wait_in_use(1), 'the released entry is freed');

# -- a new worker recovers the entries (recover) ----------------------------

my $worker = RlockTest::worker_pid($node);
look("SELECT pg_terminate_backend($worker)");
ok(RlockTest::wait_for_new_worker($node, $worker), 'the worker is restarted');
is(rows('ht:c'), 'session 1 held', 'the hold is still held after the restart');
is(in_use(), '1', 'on its entry');
ok(RlockTest::wait_for_renewal($redis, 'ht:c', 5),
	'the new worker renews it');

# -- the watchdog finds a lock gone (lose) ----------------------------------

$redis->cmd('DEL', 'ht:c');
ok(wait_rows('ht:c', 'session 1 lost'),
	'a renewal that finds the lock gone marks the entry lost');
($out, $ret) = $o->query("SELECT rlock_held('ht:c')");
is($out, '0', 'the session finds it holds nothing');
like($o->{stderr}, qr/WARNING:  session-scoped lock "ht:c" was lost/,
	'with a warning');
$o->{stderr} = '';

# -- every entry is freed ---------------------------------------------------

ok(wait_in_use(0), 'every entry of the table is free again');
is(look('SELECT count(*) FROM rlock_locks'), '0', 'rlock_locks is empty');
is($redis->cmd('EXISTS', 'ht:a', 'ht:b', 'ht:c'), 0, 'nothing is left in Redis');

$_->quit for ($s, $o, $obs);
$node->stop;
$redis->stop;
done_testing();
