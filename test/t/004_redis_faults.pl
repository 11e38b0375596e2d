# Redis faults seen from SQL: Redis down (58030 within the deadlines, no
# hang), Redis back (service resumes), Redis stalled (58030 after
# rlock.command_timeout), and a key of another type (58000).  The worker
# survives all of them and logs each outage once.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('faults', $redis,
	connect_timeout => '1s',
	command_timeout => '1s',
	conf => ["rlock.watchdog_timeout = '2s'"]);
my $worker = RlockTest::worker_pid($node);
my $budget = 1 + 1 + 1.5;	# connect + command timeout, and some slack

sub timed_psql { return RlockTest::timed_psql($node, @_) }

# Redis down
my $foreign = 'dead0000-1111-4222-8333-444455556666:1';
$redis->cmd('HSET', 'fault:held', $foreign, 1);
$redis->cmd('PEXPIRE', 'fault:held', 60_000);
my $w = $node->background_psql('postgres', on_error_stop => 0);
$w->query_safe('\set VERBOSITY verbose');
$w->query_until(qr/waiting/,
	"\\echo waiting\nSELECT rlock_lock('fault:held');\n");
ok(RlockTest::wait_for_subscribers($redis, 'fault:held', 1),
	'a backend waits for a busy lock');

$redis->stop;
my $t0 = time;
my ($rc, $out, $err, $elapsed) = timed_psql("SELECT rlock_try('fault:k')");
isnt($rc, 0, 'with Redis down, rlock_try fails');
like($err, qr/ERROR:  58030: could not reach Redis for lock "fault:k"/,
	'with 58030');
like($err, qr/DETAIL:  No usable connection to Redis at 127\.0\.0\.1:\d+/,
	'naming the server');
cmp_ok($elapsed, '<', $budget, "within the deadlines ($elapsed s)");

$w->query("SELECT 'after'");
like($w->{stderr}, qr/ERROR:  58030/, 'the waiting backend gets 58030 too');
cmp_ok(time - $t0, '<', $budget + 1, 'without hanging');
$w->{stderr} = '';

($rc, $out, $err) = timed_psql("SELECT rlock_is_locked('fault:k')");
like($err, qr/58030/, 'so do the information functions');
is(RlockTest::worker_pid($node), $worker, 'the worker keeps running');

# Redis back: service resumes
$redis->restart;
ok(RlockTest::wait_for_redis($node, 5), 'locks work again once Redis is back');
my $log = slurp_file($node->logfile);
my $losses = () = $log =~ /rlock lost its command connection to Redis/g;
is($losses, 1, 'the outage was logged once, not per request');
like($log,
	qr/rlock lost its command connection to Redis at 127\.0\.0\.1:\d+: server closed the connection/,
	'with the address and the reason');
like($log, qr/rlock command connection to Redis at 127\.0\.0\.1:\d+ is ready/,
	'and so was the recovery');
is(scalar $w->query("SELECT rlock_try('fault:after')"), 't',
	'a session that saw the error works again');
$w->quit;

# Redis stalled longer than rlock.command_timeout
$redis->freeze;
($rc, $out, $err, $elapsed) = timed_psql("SELECT rlock_try('fault:stall')");
$redis->thaw;
isnt($rc, 0, 'a stalled Redis fails the request');
like($err, qr/58030/, 'with 58030');
like($err, qr/command_timeout/, 'saying why');
cmp_ok($elapsed, '<', $budget, "within the deadlines ($elapsed s)");
ok(RlockTest::wait_for_redis($node, 5), 'service resumes after the stall');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'fault:stall') == 0 }, 10),
	'the stalled request left no lock behind (at worst its lease ran out)');
is(RlockTest::worker_pid($node), $worker, 'the worker survived the stall');

# a server that accepts connections but never answers: the worker gives
# up on the handshake after rlock.connect_timeout
my $silent = IO::Socket::INET->new(
	Listen => 5,
	LocalAddr => '127.0.0.1',
	LocalPort => 0,
	Proto => 'tcp') or die "cannot listen: $!";
$node->append_conf('postgresql.conf', 'rlock.port = ' . $silent->sockport);
$node->reload;
ok( RlockTest::wait_until(
		sub {
			my ($rc, $out, $err) = timed_psql("SELECT rlock_try('fault:silent')");
			$err =~ /58030/ && $err =~ /timed out during the (connection|TLS) handshake/;
		},
		10),
	'a silent server fails requests with 58030 once the handshake times out');
($rc, $out, $err, $elapsed) = timed_psql("SELECT rlock_try('fault:silent')");
cmp_ok($elapsed, '<', $budget, "within the deadlines ($elapsed s)");
is(RlockTest::worker_pid($node), $worker, 'the worker is still there');
$node->append_conf('postgresql.conf', 'rlock.port = ' . $redis->rlock_port);
$node->reload;
ok(RlockTest::wait_for_redis($node, 5), 'and back on the real server');

# a key holding another type: 58000 with the Redis text
$redis->cmd('SET', 'fault:string', 'not a lock');
($rc, $out, $err) = timed_psql("SELECT rlock_try('fault:string')");
like($err, qr/ERROR:  58000: Redis returned an error for lock "fault:string"/,
	'a key of another type gives 58000');
like($err, qr/DETAIL:  WRONGTYPE/, 'with the Redis error in the detail');
is($redis->cmd('GET', 'fault:string'), 'not a lock', 'and leaves the key alone');
# a fair lock whose queue is no list: the hint names the keys beside it
$redis->cmd('SET', 'redisson_lock_queue:{fault:queue}', 'not a queue');
($rc, $out, $err) = timed_psql("SELECT rlock_try_fair('fault:queue')");
like($err, qr/ERROR:  58000: Redis returned an error for lock "fault:queue".*HINT:  The lock's key, or one Redisson keeps beside it \(a fair lock's queue/s,
	"a fair lock's queue of another type gives 58000, the hint naming the queue");
is($redis->cmd('EXISTS', 'fault:queue'), 0, 'and takes nothing');
is(RlockTest::worker_pid($node), $worker, 'the worker survived it');
is($node->safe_psql('postgres', "SELECT rlock_try('fault:fine')"),
	't', 'other locks still work');

done_testing();
