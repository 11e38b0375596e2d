# A backend that dies while holding locks.  Terminated with
# pg_terminate_backend: its locks, of both scopes, are released at once,
# and sessions waiting for them in other backends get them right away,
# long before the holder's lease (a watchdog lease, or an explicit one of a
# minute) would have ended.  Killed with SIGKILL: the postmaster restarts
# the cluster, nothing releases the locks of the dead backend or of the
# others the restart ended, and each expires with its lease, never renewed,
# after which new sessions take them.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'backend deaths do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('backend_death', $redis,
	conf => [ "rlock.watchdog_timeout = '3s'", 'restart_after_crash = on' ]);
my $worker = RlockTest::worker_pid($node);

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	return ($s, $s->query_safe('SELECT pg_backend_pid()'));
}

# -- pg_terminate_backend ------------------------------------------------------

my ($h, $hpid) = session();
$h->query_safe("SELECT rlock_session_try('bd:s')");
$h->query_safe('BEGIN');
$h->query_safe("SELECT rlock_try('bd:x', '0', '1 min')");
my ($w1, $pid1) = session();
my ($w2, $pid2) = session();
RlockTest::send_query($w1, "SELECT rlock_session_lock('bd:s');");
RlockTest::send_query($w2, "BEGIN; SELECT rlock_lock('bd:x');");
ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $pid1, $pid2) == 2 }),
	'two sessions wait for the locks of a third');
ok( RlockTest::wait_for_subscribers($redis, 'bd:s', 1)
	  && RlockTest::wait_for_subscribers($redis, 'bd:x', 1),
	'subscribed to both channels');

$node->safe_psql('postgres', "SELECT pg_terminate_backend($hpid)");
my $t0 = time;
ok( RlockTest::wait_until(
		sub { RlockTest::count_waiting($node, $pid1, $pid2) == 0 }, 10),
	'terminating the holder hands both locks to the waiters');
my $elapsed = time - $t0;
cmp_ok($elapsed, '<', 1,
	"within milliseconds, not at the end of a lease ($elapsed s)");
for my $w ($w1, $w2)
{
	my ($out, $err) = RlockTest::collect($w);
	is($err, '', 'a waiter got its lock without an error');
}
is(scalar $w1->query("SELECT rlock_held('bd:s')"), '1', 'one holds bd:s');
is(scalar $w2->query("SELECT rlock_held('bd:x')"), '1', 'the other bd:x');
is(@{ $redis->owners('bd:s') } . @{ $redis->owners('bd:x') }, '11',
	'each alone, in Redis too');
eval { $h->quit };
$w2->query_safe('COMMIT');
$w1->query_safe("SELECT rlock_session_release('bd:s')");
is_deeply($redis->cmd('KEYS', 'bd:*'), [], 'nothing is left once they are done');

# -- SIGKILL -------------------------------------------------------------------

my ($k, $kpid) = session();
$k->query_safe("SELECT rlock_session_try('bd:kill:s')");
$k->query_safe('BEGIN');
$k->query_safe("SELECT rlock_try('bd:kill:x'), rlock_try('bd:kill:lease', '0', '4 s')");
$w1->query_safe("SELECT rlock_session_try('bd:other')");
my %owner = map { $_ => $redis->owners($_)->[0] }
  qw(bd:kill:s bd:kill:x bd:kill:lease bd:other);
ok( RlockTest::wait_for_renewal($redis, 'bd:kill:s', 5)
	  && RlockTest::wait_for_renewal($redis, 'bd:other', 5),
	'the locks with the watchdog are renewed while their holders live');

kill 'KILL', $kpid;
ok(RlockTest::wait_back($node),
	'the cluster restarts after a backend was killed');
ok( RlockTest::wait_for_new_worker($node, $worker),
	'and a new worker');
my @keys = sort keys %owner;
ok( RlockTest::expires_unrenewed($redis, \@keys, 8),
	"@keys expire with their leases, never renewed");
ok(RlockTest::wait_for_redis($node, 10), 'the new worker serves requests');
my ($n) = session();
is( scalar $n->query(
		"SELECT rlock_session_try('bd:kill:s') AND rlock_session_try('bd:kill:x')"),
	't', 'a new session takes the locks once they expired');
my ($new_uuid) = split /:/, $redis->owners('bd:kill:s')->[0];
my ($old_uuid) = split /:/, $owner{'bd:kill:s'};
isnt($new_uuid, $old_uuid, 'as a new owner');
$n->quit;
eval { $_->quit } for $k, $w1, $w2;
ok(RlockTest::wait_until(sub { @{ $redis->cmd('KEYS', 'bd:*') } == 0 }, 5),
	'and nothing is left');

done_testing();
