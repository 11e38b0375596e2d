# rlock on a hot standby: a streaming-replication standby of a primary,
# both with rlock preloaded and pointed at the same Redis.  The extension
# comes through replication (CREATE EXTENSION runs on the primary only);
# on the standby every lock call, both scopes, the views and the forced
# release work inside read-only transactions, and a lock held on one
# side excludes the other and its release wakes the other's waiter.
# What does not work there, or not as on the primary: writing (the
# transaction fails, and its locks go with it), changing the extension,
# and a standby reader taking the lock right after a primary's commit may
# not see that commit yet unless the writer waited for the standby to
# apply it (remote_apply).  DROP EXTENSION on the primary does not see a
# standby's holds.  A promotion keeps the standby's holds.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start;
my $primary = RlockTest::node('primary', $redis,
	init => { allows_streaming => 1 });
$primary->safe_psql('postgres',
	'CREATE TABLE stock (id int PRIMARY KEY, qty int); INSERT INTO stock VALUES (1, 10)');
$primary->backup('base');
# the standby gets postgresql.conf, with rlock's settings, from the backup
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

sub on_primary { return $primary->safe_psql('postgres', $_[0]) }
sub on_standby { return $standby->safe_psql('postgres', $_[0]) }

#---- the standby: the extension by replication, a worker of its own ----

is(on_standby('SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
is(on_standby("SELECT extversion FROM pg_extension WHERE extname = 'rlock'"),
	on_primary("SELECT extversion FROM pg_extension WHERE extname = 'rlock'"),
	'the extension came through replication');
ok( RlockTest::wait_until(
		sub { on_standby('SELECT command_connection FROM rlock_status()') eq 'ready' }),
	'the standby runs its own worker, connected to Redis');
isnt(on_standby('SELECT instance_owner FROM rlock_status()'),
	on_primary('SELECT instance_owner FROM rlock_status()'),
	'with an owner uuid of its own');
my ($rc, $out, $err) = $standby->psql('postgres', 'DROP EXTENSION rlock');
like($err, qr/cannot execute DROP EXTENSION in a read-only transaction/,
	'the extension cannot be changed there (25006)');

#---- what works on the standby, inside read-only transactions ----

my $s = $standby->background_psql('postgres', on_error_stop => 0);
my $s_pid = $s->query_safe('SELECT pg_backend_pid()');
$s->query_safe('BEGIN');
is($s->query_safe('SHOW transaction_read_only'), 'on', 'a standby transaction is read-only');
is($s->query_safe("SELECT rlock_try('sb:x')"), 't', 'rlock_try takes a lock');
is($s->query_safe("SELECT rlock_try('sb:x', '1 s', '20 s')"), 't', 're-enters it');
ok($s->query_safe("SELECT rlock_try_token('sb:t')") > 0, 'rlock_try_token counts a token');
is( $s->query_safe(
		'SELECT key, scope, count, state FROM rlock_locks WHERE pid = pg_backend_pid() ORDER BY key'),
	"sb:t|transaction|1|held\nsb:x|transaction|2|held",
	'rlock_locks shows the holds');
is($s->query_safe("SELECT rlock_held('sb:x'), rlock_is_locked('sb:x'), rlock_ttl('sb:x') > '10 s'"),
	'2|t|t', 'rlock_held, rlock_is_locked, rlock_ttl answer');
is(on_primary("SELECT rlock_try('sb:x')"), 'f', 'the primary cannot take the lock');
ok( RlockTest::wait_until(
		sub {
			on_primary("SELECT holder, instance, pid FROM rlock_holder('sb:x')")
			  eq "rlock|standby|$s_pid";
		}),
	'rlock_holder on the primary names the standby and its session');
is($s->query_safe("SELECT rlock_release('sb:t')"), 't', 'rlock_release gives one back early');
$s->query_safe('COMMIT');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'sb:x') == 0 }, 10),
	'the commit released the lock');

$s->query_safe("SELECT rlock_session_lock('sb:s')");
$s->query_safe("SELECT rlock_session_try('sb:s', '0', '1 min')");
$s->query_safe('BEGIN; SELECT rlock_session_try(\'sb:s2\'); ROLLBACK');
ok($s->query_safe("SELECT rlock_session_try_token('sb:s3')") > 0,
	'rlock_session_try_token counts a token');
is_deeply($redis->counts('sb:s'), [2], 'session locks stack');
is($redis->cmd('EXISTS', 'sb:s2'), 1, 'and ignore a rollback');
is($s->query_safe("SELECT rlock_session_release('sb:s')"), 't', 'rlock_session_release');
is($s->query_safe('SELECT rlock_release_all()'), '3', 'rlock_release_all');
is($redis->cmd('EXISTS', 'sb:s', 'sb:s2', 'sb:s3'), 0, 'nothing left');
ok(on_standby('SELECT acquired FROM rlock_stats') >= 5, 'rlock_stats counts the standby\'s acquires');
on_standby('SELECT rlock_stats_reset()');
is(on_standby('SELECT acquired FROM rlock_stats'), '0', 'rlock_stats_reset works there');

# a forced release from the standby: the primary's holder fails at commit
my $p = $primary->background_psql('postgres', on_error_stop => 0);
$p->query_safe("BEGIN; SELECT rlock_try('sb:f')");
is(on_standby("SELECT rlock_force_release('sb:f')"), 't',
	'rlock_force_release on the standby removes a primary\'s lock');
$p->query('COMMIT');
like($p->{stderr}, qr/lock "sb:f" was lost before the transaction committed/,
	'whose transaction then fails at commit (40001)');
$p->{stderr} = '';

# a key prefix stored on the primary reaches the standby's sessions
on_primary("ALTER DATABASE postgres SET rlock.key_prefix = 'ro:'");
$primary->wait_for_catchup($standby);
my $pre = $standby->background_psql('postgres');
$pre->query_safe("SELECT rlock_session_try('k')");
is($redis->cmd('EXISTS', 'ro:k'), 1, 'rlock.key_prefix set on the primary applies there');
$pre->quit;
on_primary('ALTER DATABASE postgres RESET rlock.key_prefix');
$primary->wait_for_catchup($standby);
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'ro:k') == 0 }, 10),
	'(released when that session ended)');
my $s2 = $standby->background_psql('postgres');

#---- what does not: writing ----

$s->query_safe("BEGIN; SELECT rlock_try('sb:w')");
$s->query('UPDATE stock SET qty = 0 WHERE id = 1');
like($s->{stderr}, qr/cannot execute UPDATE in a read-only transaction/,
	'a write on the standby fails (25006)');
$s->{stderr} = '';
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'sb:w') == 0 }, 10),
	'and the failed transaction\'s lock is released at once');
$s->query('ROLLBACK');

#---- exclusion and wake-up, both ways ----

$s->query_safe("BEGIN; SELECT rlock_try('sb:wake')");
RlockTest::send_query($p, "SELECT rlock_session_lock('sb:wake');");
ok(RlockTest::waiting_in_sql($primary, 'sb:wake'), 'a primary session waits for the standby\'s lock');
my $t0 = time;
$s->query_safe('COMMIT');
($out, $err) = RlockTest::collect($p);
my $took = time - $t0;
is($err, '', 'the standby\'s commit hands it the lock');
cmp_ok($took, '<', 5, "woken by the unlock message, not the 30 s lease ($took s)");

RlockTest::send_query($s, "BEGIN; SELECT rlock_lock('sb:wake');");
ok(RlockTest::waiting_in_sql($standby, 'sb:wake'), 'an rlock_lock on the standby waits for the primary\'s lock');
$t0 = time;
$p->query_safe("SELECT rlock_session_release('sb:wake')");
($out, $err) = RlockTest::collect($s);
$took = time - $t0;
is($err, '', 'the primary\'s release hands it the lock');
cmp_ok($took, '<', 5, "woken by the unlock message ($took s)");
$s->query_safe('COMMIT');

#---- reading on the standby what the previous holder wrote ----

sub pause_replay
{
	on_standby('SELECT pg_wal_replay_pause()');
	return RlockTest::wait_until(
		sub { on_standby('SELECT pg_get_wal_replay_pause_state()') eq 'paused' });
}

# with replay behind (paused here), the lock comes before the data
ok(pause_replay(), 'standby replay paused');
$p->query_safe("BEGIN; SELECT rlock_try('sb:row'); UPDATE stock SET qty = qty - 1 WHERE id = 1");
RlockTest::send_query($s, "BEGIN; SELECT rlock_try('sb:row', '30 s');");
ok(RlockTest::waiting_in_sql($standby, 'sb:row'), 'a standby session waits for the row\'s lock');
$p->query_safe('COMMIT');
($out, $err) = RlockTest::collect($s);
is($out, 't', 'the primary\'s commit hands it the lock');
is($s->query_safe('SELECT qty FROM stock WHERE id = 1'), '10',
	'but it reads the row as it was before that commit: replay is behind');
$s->query_safe('COMMIT');
on_standby('SELECT pg_wal_replay_resume()');
$primary->wait_for_catchup($standby);

# with synchronous_commit = remote_apply the commit, and so the release,
# waits until the standby has applied it
on_primary("ALTER SYSTEM SET synchronous_standby_names = 'standby'");
on_primary('SELECT pg_reload_conf()');
ok( RlockTest::wait_until(
		sub {
			on_primary("SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'")
			  eq 'sync';
		}),
	'the standby is synchronous');
ok(pause_replay(), 'standby replay paused again');
my $p_pid = $p->query_safe('SELECT pg_backend_pid()');
$p->query_safe("SET synchronous_commit = remote_apply");
$p->query_safe("BEGIN; SELECT rlock_try('sb:row'); UPDATE stock SET qty = qty - 1 WHERE id = 1");
RlockTest::send_query($s, "BEGIN; SELECT rlock_try('sb:row', '30 s');");
ok(RlockTest::waiting_in_sql($standby, 'sb:row'), 'a standby session waits for the row\'s lock');
$p->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
ok( RlockTest::wait_until(
		sub {
			on_primary("SELECT wait_event FROM pg_stat_activity WHERE pid = $p_pid") eq 'SyncRep';
		}),
	'the primary\'s COMMIT waits for the standby to apply it');
is_deeply([ map { (split /:/)[0] } @{ $redis->owners('sb:row') } ],
	[ on_primary('SELECT instance_owner FROM rlock_status()') ],
	'the primary\'s session keeps the lock meanwhile');
is(on_standby("SELECT state FROM rlock_locks WHERE key = 'sb:row'"), 'waiting',
	'and the standby session still waits');
on_standby('SELECT pg_wal_replay_resume()');
($out, $err) = RlockTest::collect($s);
is($out, 't', 'once applied, the lock is handed over');
is($s->query_safe('SELECT qty FROM stock WHERE id = 1'), '8',
	'and the standby session reads the committed row');
$s->query_safe('COMMIT');
$p->query_safe('RESET synchronous_commit');
is(on_primary('SELECT qty FROM stock WHERE id = 1'), '8',
	'the primary\'s commit went through');
on_primary('ALTER SYSTEM RESET synchronous_standby_names');
on_primary('SELECT pg_reload_conf()');

#---- DROP EXTENSION on the primary does not see the standby's holds ----

$s2->query_safe("SELECT rlock_session_try('sb:drop')");
($rc, $out, $err) = $primary->psql('postgres', 'DROP EXTENSION rlock');
is($rc, 0, 'DROP EXTENSION on the primary succeeds while a standby session holds a lock');
$primary->wait_for_catchup($standby);
is(on_standby("SELECT count(*) FROM pg_extension WHERE extname = 'rlock'"), '0',
	'the extension is gone from the standby too');
is($redis->cmd('EXISTS', 'sb:drop'), 1, 'but the standby session still holds its lock');
$s2->quit;
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'sb:drop') == 0 }, 10),
	'until that session ends');
on_primary('CREATE EXTENSION rlock');
$primary->wait_for_catchup($standby);

#---- a promotion keeps the standby's holds ----

my $worker = RlockTest::worker_pid($standby);
$s->query_safe("SELECT rlock_session_try('sb:promote')");
$s->query_safe("BEGIN; SELECT rlock_try('sb:px')");
$standby->promote;
ok(RlockTest::wait_until(sub { on_standby('SELECT pg_is_in_recovery()') eq 'f' }),
	'the standby is promoted');
is(RlockTest::worker_pid($standby), $worker, 'by the same worker');
is($s->query_safe("SELECT rlock_held('sb:promote'), rlock_held('sb:px')"), '1|1',
	'its session keeps both holds');
is(on_primary("SELECT rlock_try('sb:promote')"), 'f', 'and the old primary is still refused');
$s->query_safe('COMMIT');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'sb:px') == 0 }, 10),
	'the transaction begun before the promotion commits and releases');
is( $s->query_safe(
		"BEGIN; SELECT rlock_try('sb:px'); UPDATE stock SET qty = 0 WHERE id = 1; COMMIT"),
	"t", 'a new one writes under a lock');
is($s->query_safe("SELECT rlock_session_release('sb:promote')"), 't',
	'and the session lock is released as usual');

$s->quit;
$p->quit;
$standby->stop;
$primary->stop;
done_testing();
