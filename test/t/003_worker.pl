# The background worker: visible in pg_stat_activity, restarted after it
# is terminated without stranding anybody, renewing what was held before
# it restarted; and after a crash restart of the cluster, the old owners'
# leases simply run out.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('worker', $redis,
	conf => [ "rlock.watchdog_timeout = '3s'", 'restart_after_crash = on' ]);

is( $node->safe_psql('postgres',
		"SELECT backend_type, datname IS NULL, wait_event_type FROM pg_stat_activity WHERE backend_type = 'rlock worker'"
	),
	'rlock worker|t|Extension',
	'one worker, without a database, waiting on its event set');

# terminating the worker while a backend waits for it
my $foreign = 'c0ffee00-1111-4222-8333-444455556666:1';
$redis->cmd('HSET', 'wk:busy', $foreign, 1);
$redis->cmd('PEXPIRE', 'wk:busy', 60_000);
my $w = $node->background_psql('postgres', on_error_stop => 0);
$w->query_safe('\set VERBOSITY verbose');
$w->query_until(qr/waiting/, "\\echo waiting\nSELECT rlock_lock('wk:busy');\n");
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT rlock_lock(%' AND wait_event_type = 'Extension'"
			) == 1;
		}),
	'a backend waits for a busy lock');
my $old_pid = RlockTest::worker_pid($node);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)");
$w->query("SELECT 'next'");
like($w->{stderr}, qr/ERROR:  55000: rlock background worker is not running/,
	'the waiting backend gets 55000 instead of hanging');
$w->{stderr} = '';
ok(RlockTest::wait_for_new_worker($node, $old_pid), 'the postmaster starts a new worker');
ok(RlockTest::wait_for_redis($node, 10), 'which serves requests');
is_deeply($redis->owners('wk:busy'), [$foreign],
	'the abandoned wait took nothing');
is($node->safe_psql('postgres', "SELECT rlock_try('wk:after')"),
	't', 'locks work after the restart');

# a request made once the worker is gone, before the next one runs, waits
# for the next one and is served by it
$old_pid = RlockTest::worker_pid($node);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)");
ok(RlockTest::wait_until(sub { RlockTest::worker_pid($node) ne $old_pid }, 10),
	'the worker is gone');
is($node->safe_psql('postgres', "SELECT rlock_try('wk:gap')"), 't',
	'a request made in the gap is served by the next worker');

# holds taken before a restart are renewed by the new worker, and still
# released at commit
my $h = $node->background_psql('postgres');
$h->query_safe("BEGIN");
$h->query_safe("SELECT rlock_try('wk:kept')");
$old_pid = RlockTest::worker_pid($node);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)");
ok(RlockTest::wait_for_new_worker($node, $old_pid),
	'the worker restarted while a transaction held a lock');
ok(RlockTest::wait_for_renewal($redis, 'wk:kept', 10),
	'the new worker renews the lease of that hold');
$h->query_safe("COMMIT");
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'wk:kept') == 0 }, 5),
	'and the commit releases it');
$h->quit;

# SIGTERM (as pg_terminate_backend) and SIGHUP are handled
$old_pid = RlockTest::worker_pid($node);
kill 'HUP', $old_pid;
is(RlockTest::worker_pid($node), $old_pid, 'SIGHUP does not stop the worker');
is($node->safe_psql('postgres', "SELECT rlock_try('wk:hup')"),
	't', 'and it keeps serving');

# SIGKILL: the postmaster restarts the cluster; the old owners are never
# renewed and their leases run out
my $s = $node->background_psql('postgres');
$s->query_safe("SELECT rlock_session_try('wk:crash')");
my $old_owner = $redis->owners('wk:crash')->[0];
kill 'KILL', RlockTest::worker_pid($node);
ok(RlockTest::wait_back($node),
	'the cluster comes back after the crash');
eval { $s->quit };
is_deeply($redis->owners('wk:crash'), [$old_owner],
	'the old hold stays in Redis for now');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'wk:crash') == 0 }, 10),
	'and expires with its lease, never renewed');
ok(RlockTest::wait_for_redis($node, 10), 'the new worker serves requests');
my $n = $node->background_psql('postgres');
$n->query_safe("SELECT rlock_session_try('wk:new')");
my ($old_uuid) = split /:/, $old_owner;
my ($new_uuid) = split /:/, $redis->owners('wk:new')->[0];
isnt($new_uuid, $old_uuid, 'owners after the restart have a new uuid');
$n->quit;

done_testing();
