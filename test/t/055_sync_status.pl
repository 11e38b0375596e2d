# rlock.sync_replicas = auto (the default) and what rlock_status() says of
# it, on a standalone primary:
#
# - ROLE refused by the ACL (a user without +role): the replicas are
#   counted with INFO replication, and acquisitions wait for one (WAIT);
#   the log says so once;
# - ROLE and INFO both refused: replicas unknown, acquisitions not
#   confirmed, a WARNING in the log and rlock_status() saying why;
# - two replicas, one frozen: auto needs one confirmation and WAIT asks
#   for one, so acquisitions are granted at once, not after
#   rlock.sync_timeout;
# - the only replica frozen: the acquisition is undone and fails with
#   58030 after rlock.sync_timeout; rlock_status() shows 0 replicas
#   confirming and the failure.
use strict;
use warnings;

use File::Temp ();
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;

plan skip_all => 'counting replicas does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my @replicas = map { $redis->start_replica } 1 .. 2;

# a user of rlock's own without ROLE, and one without ROLE and INFO
$redis->cmd('ACL', 'SETUSER', 'norole', 'on', '>norolepw', '~*', '&*', '+@all', '-role');
$redis->cmd('ACL', 'SETUSER', 'blind', 'on', '>blindpw', '~*', '&*', '+@all', '-role', '-info');
my $dir = File::Temp::tempdir(CLEANUP => 1);
my $pw = RlockTest::password_file($dir, 'norolepw');

my $node = RlockTest::node('syncstatus', $redis,
	conf => [
		"rlock.username = 'norole'",
		"rlock.password_file = '$pw'",
		"rlock.sync_timeout = '1s'" ]);

sub status
{
	return $node->safe_psql('postgres', "SELECT $_[0] FROM rlock_status()");
}

sub waits
{
	return ($redis->cmd('INFO', 'commandstats') =~ /cmdstat_wait:calls=(\d+)/)[0] // 0;
}

#---- ROLE refused: INFO replication counts the replicas ----

ok(RlockTest::wait_until(sub { status('sync_connection') eq 'ready' }, 20),
	'ROLE refused: the replicas are counted all the same (sync connection made)');
is(status('replicas'), '2', 'rlock_status: two replicas');
is(status('sync_wait'), '1 replica', 'auto waits for one of them');
my $before = waits();
is($node->safe_psql('postgres', "SELECT rlock_session_try('st:a')"), 't',
	'a lock is granted');
cmp_ok(waits(), '>', $before, 'after a WAIT');
ok(RlockTest::wait_until(sub { status('replicas_confirming') ge '1' }, 5),
	'rlock_status: replicas confirming shown');
like(slurp_file($node->logfile),
	qr/rlock counts the replicas of Redis at \S+ with INFO replication: ROLE was refused/,
	'the log says how the replicas are counted');
$node->safe_psql('postgres', "SELECT rlock_release_all()");

#---- two replicas, one frozen: granted at once ----

$node->append_conf('postgresql.conf', "rlock.sync_timeout = '60s'");
$node->reload;
$replicas[1]->freeze;
my ($rc, $out, $err) = $node->psql('postgres',
	"SET statement_timeout = '10s'; SELECT rlock_session_try('st:b'); SELECT rlock_release_all();");
is($err, '', 'one of two replicas frozen: no error (a WAIT for both would wait 60 s)');
like($out, qr/^t\n/, 'the lock was granted');
$replicas[1]->thaw;

#---- the only replica frozen: undone, 58030, and the status says so ----

$replicas[1]->stop;
$node->append_conf('postgresql.conf', "rlock.sync_timeout = '500ms'");
$node->reload;
ok(RlockTest::wait_until(sub { status('replicas') eq '1' }, 20),
	'one replica left');
$replicas[0]->freeze;
($rc, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT rlock_session_try('st:c')");
like($err, qr/ERROR:  58030: Redis replicas did not confirm lock "st:c" in time\n.*DETAIL:  0 of the 1 replicas needed confirmed it/s,
	'the acquisition is undone and fails with 58030');
is($redis->cmd('EXISTS', 'st:c'), 0, 'nothing left in Redis');
is(status('replicas_confirming'), '0', 'rlock_status: 0 replicas confirming');
like(status('last_sync_failure'), qr/^0 of the 1 replicas needed confirmed it/,
	'rlock_status: the last failed confirmation');
is(status('last_sync_failure_at IS NOT NULL'), 't', 'with its time');
$replicas[0]->thaw;
ok(RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT rlock_session_try('st:d'), rlock_release_all()") eq 't|1';
		},
		10),
	'thawed, locks are granted again');

#---- ROLE and INFO refused: not known, said in the log and the status ----

RlockTest::password_file($dir, 'blindpw');
$node->append_conf('postgresql.conf', "rlock.username = 'blind'");
$node->reload;
ok(RlockTest::wait_until(
		sub { status('sync_wait') eq 'nothing: replicas not known (ROLE and INFO refused)' }, 20),
	'rlock_status: replicas not known, and why');
$before = waits();
is($node->safe_psql('postgres', "SELECT rlock_session_try('st:e'), rlock_release_all()"),
	't|1', 'a lock is granted');
is(waits(), $before, 'without a WAIT');
like(slurp_file($node->logfile),
	qr/WARNING:  rlock cannot tell whether Redis at \S+ has replicas: ROLE and INFO replication were refused/,
	'a warning says that acquisitions are not confirmed');

$node->stop;
$_->stop for @replicas;
$redis->stop;
done_testing();
