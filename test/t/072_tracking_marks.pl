# The check before commit without a round trip, attacked where its marks
# and the worker's bookkeeping of them could be fooled: a commit must not
# trust a lock that was removed before the worker's freshness point.
#
# - a worker replaced while a transaction holds a tracked lock: the new
#   worker numbers its armings afresh, and a hold the old one tracked
#   must not pass for one the new one tracks (failed on rev26);
# - marks forged by another client that found the channel (PUBSUB
#   CHANNELS) and reads the marks on it: past, current, next, far ahead
#   and malformed numbers around a deletion; a foreign script that
#   publishes the mark of a re-entering acquire still on its way and
#   deletes the key in one go, so that an invalidation of the key comes
#   right behind a mark of it; and the next mark published before the
#   worker sends the acquire it will go with (gdb holds the worker there,
#   as a machine that did not schedule it for a moment would), then the
#   lock deleted and Redis put to sleep: the worker read the forged mark
#   after sending the acquire, and took that sending time for the point
#   up to which it had read every announcement (failed on rev26); and a
#   flood of 100,000 forged marks (the worker stays and idles);
# - another client that redirects its own tracking to rlock's subscriber
#   (plain and BCAST), so that invalidations of the lock's key that are
#   not rlock's arrive around its marks;
# - more marks on their way than the worker keeps (busy acquires publish
#   none), then a lock deleted;
# - a lock in database 3 with a key prefix and a fencing token (Redis 7.0
#   tracks every key a script names), a FLUSHDB of another database in
#   between;
# - renewals and a partial release of a re-entered lock while the
#   transaction runs, with short leases;
# - an acquisition that a replica must confirm (rlock.sync_replicas =
#   auto with a replica): it carries no mark.
#
# Each deletion is made at least 100 ms before COMMIT with a window of
# 1 s: the worker has by then read what Redis announced, so a commit that
# succeeds trusted a lock Redis told it was gone, or never told it of.
# The forged mark with Redis asleep is the exception: nothing is
# announced until Redis wakes, and the deletion is older than the
# session's window of 300 ms when the COMMIT is sent.  Run it on Redis
# 7.0, Redis 8 and Valkey 8 (each server's redis-server first in PATH):
# they differ in which keys a script's reads have tracked.

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use IPC::Run ();
use Time::HiRes ();
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Tracking qw(command_field armed commit_fails);
use RlockTest::Proxy;

plan skip_all => 'the relay reads the plain protocol: not over TLS'
  if RlockTest::TLS::everywhere();

my $acquire_sha = sha1_hex(RlockTest::script_text(
		($ENV{TESTDIR} // '.') . '/src/kinds/plain/acquire.lua'));
my $renew_sha = sha1_hex(RlockTest::script_text(
		($ENV{TESTDIR} // '.') . '/src/kinds/plain/renew.lua'));
my $verify_sha = sha1_hex(RlockTest::script_text(
		($ENV{TESTDIR} // '.') . '/src/kinds/plain/verify.lua'));

# The number of a mark that a subscriber to the channel of marks read
sub mark_of
{
	my ($message) = @_;
	return ($message // [ '', '' ])->[1] =~ /^(\d+)/ ? $1 : -1;
}

# Read the MONITOR stream $mon until a line matches $re (bounded)
sub monitor_until
{
	my ($mon, $re, $seconds) = @_;
	return RlockTest::wait_until(
		sub {
			my $line = eval { $mon->read_reply(0.1) };
			defined $line && $line =~ $re;
		},
		$seconds);
}

my $redis =
  RlockTest::Redis->start(args => [ '--enable-debug-command', 'local' ]);
diag('server: ' . join(' ', $redis->cmd('INFO', 'server') =~
	  /^((?:redis|valkey)_version:\S+)/mg));
# a window long enough that psql's round trips between the lock and the
# COMMIT leave the worker fresh (the default is 1 ms); through a relay
# that can hold back what the command connection sends
my $proxy = RlockTest::Proxy->start($redis->port);
my $node = RlockTest::node('marks', $redis,
	command_timeout => '5s',
	conf => [ "rlock.port = " . $proxy->port, "rlock.verify_window = '1s'" ]);
ok(RlockTest::wait_for_redis($node, 15), 'rlock is connected through the relay');
ok(armed($redis), 'tracking is on');

my $s = $node->background_psql('postgres', on_error_stop => 0);
my $t = $node->background_psql('postgres', on_error_stop => 0);
my $u;

#---- a worker replaced ----

# The lock is tracked by the first worker under its first arming.  The
# worker exits (SIGTERM: the sessions keep their locks); the next one
# renews the lock it took over, on its own connection, and arms tracking
# with a number of its own, the first again.  It never read the key
# under tracking: Redis announces nothing of it, and the new worker knows
# nothing of it either.
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:restart')");
my $mon = $redis->monitor;
my $old = RlockTest::worker_pid($node);
kill 'TERM', $old;
ok(RlockTest::wait_for_new_worker($node, $old, 30), 'a new worker runs');
ok(armed($redis), 'it arms tracking');
ok(monitor_until($mon, qr/"EVALSHA" "$renew_sha" .*"tm:restart"/, 15),
	'it renews the lock the session holds');
$redis->cmd('DEL', 'tm:restart');
# a mark comes back: the worker is fresh
$t->query_safe("SELECT rlock_session_try('tm:fresh')");
$t->query_safe("SELECT rlock_session_release('tm:fresh')");
commit_fails($s, 'tm:restart',
	'a lock tracked by the previous worker and deleted since fails the commit');

# Scripts $sha (verify by default) Redis ran since the last call: the
# MONITOR stream $mon is read up to an ECHO sent after them
my $echoes = 0;
sub verifies_since
{
	my ($redis, $mon, $sha) = @_;
	my $mark = 'echo-' . ++$echoes;
	$sha //= $verify_sha;
	$redis->cmd('ECHO', $mark);
	my $n = 0;
	while (1)
	{
		my $line = $mon->read_reply(10);
		last if $line =~ /"ECHO" "\Q$mark\E"/;
		$n++ if $line =~ /"EVALSHA" "$sha"/;
	}
	return $n;
}

#---- marks forged by another client ----

my ($channel) = @{ $redis->cmd('PUBSUB', 'CHANNELS', 'rlock:track:*') };
like($channel // '', qr/^rlock:track:[0-9a-f]{16}$/,
	'another client finds the channel of marks');
my $spy = $redis->connect;
$spy->call('SUBSCRIBE', $channel);
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:forged')");
my $seen = $spy->next_message(5);
$spy->drain(0.05);
like($seen->[1] // '', qr/^\d+/, 'and reads the mark of each grant');
my $last = mark_of($seen);
# what follows the number in a mark, if anything: copied into forgeries
my $tail = substr($seen->[1], length($last));
$redis->cmd('DEL', 'tm:forged');
for my $n ($last - 1, $last, map({ $last + $_ } 1 .. 5))
{
	$redis->cmd('PUBLISH', $channel, $_) for ($n, "$n$tail", "$n:0");
}
$redis->cmd('PUBLISH', $channel, $_)
  for ('18446744073709551615', '18446744073709551616', '-1', "$last ", 'x', '');
# the next marks, published before and after a real one
$redis->cmd('PUBLISH', $channel, $last + 1);
$t->query_safe("SELECT rlock_session_try('tm:forged:other')");
$redis->cmd('PUBLISH', $channel, $last + 2);
$t->query_safe("SELECT rlock_session_release('tm:forged:other')");
commit_fails($s, 'tm:forged',
	'a lock deleted among forged marks fails the commit');

# A mark forged for a re-entering acquire still on its way (held in the
# relay), and a deletion of the key right behind it, in one script: the
# invalidation of the key comes right behind a mark of its hold, as the
# acquire's own would.
$spy->drain(0.05);
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:reenter')");
$last = mark_of($spy->next_message(5));
is($proxy->hold('rlock_command'), 1,
	'the relay holds back what the command connection sends');
RlockTest::send_query($s, "SELECT rlock_try('tm:reenter');");
ok(RlockTest::wait_until(sub { $proxy->held_count($acquire_sha) >= 1 }, 10),
	'the acquire that re-enters the lock is on its way');
my $forge = q{
	redis.call('publish', KEYS[2], ARGV[1])
	redis.call('del', KEYS[1])
	return 1
};
is($redis->cmd('EVAL', $forge, 2, 'tm:reenter', $channel, $last + 1 . $tail), 1,
	'another client publishes its mark and deletes the lock in one script');
is($proxy->resume, 'resumed', 'the acquire reaches Redis');
RlockTest::collect($s);
commit_fails($s, 'tm:reenter', 'the commit fails');

# A forged mark read after the acquire it names was sent, and before
# Redis ran it: the worker would take the acquire's sending time for the
# point up to which it has read every announcement, while the deletion
# announced behind the forged mark waits in a Redis that sleeps.  gdb
# stops the worker as it gives that acquire its mark (a worker that the
# machine did not schedule for a moment); meanwhile the other client
# publishes the mark it expects, then deletes the lock and makes Redis
# sleep.  The worker goes on once the deletion is older than the
# session's window (300 ms), and the COMMIT follows at once.
$spy->drain(0.05);
$s->query_safe("SET rlock.verify_window = '300ms'");
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:stalled')");
$last = mark_of($spy->next_message(5));
my $worker = RlockTest::worker_pid($node);
my ($gdb_in, $gdb_out) = ('', '');
my $gdb = IPC::Run::start(
	[ 'gdb', '-p', $worker, '-q', '-nx',
	  '-ex', 'set confirm off',
	  '-ex', 'set pagination off',
	  '-ex', 'break rlock_track_mark_acquire',
	  '-ex', 'continue' ],
	'<', \$gdb_in, '>&', \$gdb_out);
ok( RlockTest::wait_until(
		sub { eval { $gdb->pump_nb }; $gdb_out =~ /Breakpoint 1 at/ }, 30),
	'gdb waits in the worker for the next acquire to get its mark')
  or diag($gdb_out);
# a reply on the command connection just now: the commit trusts it
$u = $node->background_psql('postgres', on_error_stop => 0);
$u->query_safe("SELECT rlock_is_locked('tm:stalled:probe')");
RlockTest::send_query($t, "SELECT rlock_session_try('tm:stalled:next');");
ok( RlockTest::wait_until(
		sub { eval { $gdb->pump_nb }; $gdb_out =~ /Breakpoint 1, / }, 10),
	'the worker stops there')
  or diag($gdb_out);
$redis->cmd('PUBLISH', $channel, $_) for ($last + 1, $last + 1 . $tail);
my $stall = $redis->connect;
$mon = $redis->monitor;
# one write: Redis runs both before it sends anybody anything
$stall->{sock}->print(
	RlockTest::Resp::encode([ 'DEL', 'tm:stalled' ])
	  . RlockTest::Resp::encode([ 'DEBUG', 'SLEEP', '1.5' ]));
my $deleted_at = Time::HiRes::time();
# not a wait for an outcome: the deletion must be older than the window
Time::HiRes::sleep(0.4);
$gdb_in .= "detach\nquit\n";
ok(RlockTest::wait_until(sub { eval { $gdb->pump_nb }; !$gdb->pumpable }, 10),
	'the worker goes on');
$gdb->finish;
my $age = Time::HiRes::time() - $deleted_at;
$s->query('COMMIT');
like($s->{stderr}, qr/lock "tm:stalled" was lost/,
	sprintf('a lock deleted %.2f s before COMMIT, before the acquire the forged mark names was sent: the commit fails', $age));
$s->{stderr} = '';
cmp_ok($age, '<', 1.2, 'COMMIT came while Redis still slept');
is($stall->read_reply(10), 1, 'the deletion ran');
is($stall->read_reply(10), 'OK', 'and Redis slept behind it');
is(verifies_since($redis, $mon), 1, 'the commit asked Redis');
RlockTest::collect($t);
$t->query_safe("SELECT rlock_session_release('tm:stalled:next')");
$s->query_safe('RESET rlock.verify_window');
$u->quit;

# A flood of forged marks: the worker stays, idles a moment later, and
# still catches a deleted lock.
sub worker_cpu
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my @f = split / /, scalar <$fh>;
	return $f[13] + $f[14];    # utime + stime, in clock ticks
}
$worker = RlockTest::worker_pid($node);
my $flood = q{
	for i = 1, tonumber(ARGV[2]) do
		redis.call('publish', KEYS[1], (ARGV[1] + i % 7) .. ':' .. string.format('%016x', i))
	end
	return 1
};
$redis->cmd('EVAL', $flood, 1, $channel, $last, 100000);
$t->query_safe("SELECT rlock_session_try('tm:flood:after')");
my $cpu = worker_cpu($worker);
Time::HiRes::sleep(1);
cmp_ok(worker_cpu($worker) - $cpu, '<', 20,
	'after 100,000 forged marks the worker is idle a moment later');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:flood')");
$redis->cmd('DEL', 'tm:flood');
commit_fails($s, 'tm:flood', 'and a deleted lock fails the commit');
is(RlockTest::worker_pid($node), $worker, 'the same worker throughout');
$t->query_safe("SELECT rlock_session_release('tm:flood:after')");

#---- another client's tracking redirected to rlock's subscriber ----

my $sub_id = $redis->client_id('rlock_subscriber');
my $f = $redis->connect;
is($f->call('CLIENT', 'TRACKING', 'ON', 'REDIRECT', $sub_id), 'OK',
	"another client redirects its tracking to rlock's subscriber");
my $g = $redis->connect;
is($g->call('CLIENT', 'TRACKING', 'ON', 'REDIRECT', $sub_id, 'BCAST',
		'PREFIX', 'tm:'),
	'OK', 'and one in BCAST mode for every key of the test');
$f->call('HGETALL', 'tm:redirected');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:redirected')");
$f->call('HGETALL', 'tm:redirected');
$redis->cmd('HSET', 'tm:redirected:other', 'x', 1);
$f->call('HGETALL', 'tm:redirected:other');
$redis->cmd('DEL', 'tm:redirected');
commit_fails($s, 'tm:redirected',
	'a deletion among invalidations of the same key for other clients fails the commit');
$f->call('CLIENT', 'TRACKING', 'OFF');
$g->call('CLIENT', 'TRACKING', 'OFF');

#---- more marks on their way than the worker keeps ----

# Busy acquires publish no mark; the worker keeps 8192 on their way.
$u = $node->background_psql('postgres', on_error_stop => 0);
$u->query_safe("SELECT rlock_session_try('tm:busy')");
$mon = $redis->monitor;
verifies_since($redis, $mon, $acquire_sha);
is($t->query_safe(
		"SELECT count(*) FROM generate_series(1, 9000) i WHERE rlock_session_try('tm:busy')"),
	0, '9000 acquires of a lock another session holds: all busy');
cmp_ok(verifies_since($redis, $mon, $acquire_sha), '>=', 9000,
	'each one ran in Redis, and published no mark');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:wrapped')");
$s->query_safe('COMMIT');
is(verifies_since($redis, $mon), 0,
	'after that a fresh lock is vouched for without a verify');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:wrapped')");
$redis->cmd('DEL', 'tm:wrapped');
commit_fails($s, 'tm:wrapped', 'and one deleted fails the commit');
$u->query_safe("SELECT rlock_session_release('tm:busy')");

#---- renewals and a partial release ----

$s->quit;
$t->quit;
$u->quit;
$node->stop;
$proxy->stop;

my $node2 = RlockTest::node('marks_short', $redis,
	conf => [
		"rlock.verify_window = '1s'",
		"rlock.verify_margin = '50ms'",
		"rlock.watchdog_timeout = '300ms'" ]);
ok(RlockTest::wait_for_redis($node2, 15), 'a node with leases of 300 ms');
ok(armed($redis), 'tracking is on');
$s = $node2->background_psql('postgres', on_error_stop => 0);
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:renewed')");
ok(RlockTest::wait_for_renewal($redis, 'tm:renewed', 5),
	'the watchdog renews the lock during the transaction');
$redis->cmd('DEL', 'tm:renewed');
commit_fails($s, 'tm:renewed', 'deleted after a renewal, it fails the commit');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:partial')");
$s->query_safe("SELECT rlock_try('tm:partial')");
$s->query_safe("SELECT rlock_release('tm:partial')");
$redis->cmd('DEL', 'tm:partial');
commit_fails($s, 'tm:partial',
	'deleted after a partial release of the re-entered lock, it fails the commit');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:leased', '0', '2s')");
$redis->cmd('DEL', 'tm:leased');
commit_fails($s, 'tm:leased', 'a lock with a lease of its own, deleted, fails the commit');
$s->quit;
$node2->stop;

#---- database 3, a key prefix, a fencing token ----

my $node3 = RlockTest::node('marks_db', $redis,
	conf => [
		"rlock.verify_window = '1s'",
		'rlock.database = 3',
		"rlock.key_prefix = 'tm:{app}:'" ]);
ok(RlockTest::wait_for_redis($node3, 15), 'a node on database 3 with a key prefix');
ok(armed($redis), 'tracking is on');
my $db3 = $redis->connect;
$db3->call('SELECT', 3);
$s = $node3->background_psql('postgres', on_error_stop => 0);
$s->query_safe('BEGIN');
like($s->query_safe("SELECT rlock_try_token('tok')"), qr/^\d+$/,
	'a lock with a fencing token');
$redis->cmd('SELECT', 5);
$redis->cmd('SET', 'tm:other-db', 1);
$redis->cmd('FLUSHDB');
$redis->cmd('SELECT', 0);
ok(armed($redis), 'a FLUSHDB of database 5: tracking is on');
is($db3->call('EXISTS', 'tm:{app}:tok'), 1, 'the lock is in database 3');
$db3->call('DEL', 'tm:{app}:tok');
commit_fails($s, 'tok', 'deleted there, it fails the commit');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try_token('tok2')");
my ($counter) = @{ $db3->call('KEYS', 'redisson_lock_token:*tok2*') };
ok(defined $counter, "its token counter: $counter");
$db3->call('INCR', $counter);
$db3->call('HDEL', 'tm:{app}:tok2',
	grep { $_ ne 'mode' } @{ $db3->call('HKEYS', 'tm:{app}:tok2') });
commit_fails($s, 'tok2',
	'its token counter moved and its owner removed, it fails the commit');
$s->quit;
$node3->stop;

#---- an acquisition a replica must confirm ----

my $replica = $redis->start_replica;
my $node4 = RlockTest::node('marks_sync', $redis,
	conf => [ "rlock.verify_window = '1s'", 'rlock.sync_replicas = auto' ]);
ok(RlockTest::wait_for_redis($node4, 15), 'a node that waits for a replica');
ok(armed($redis), 'tracking is on');
$s = $node4->background_psql('postgres', on_error_stop => 0);
$mon = $redis->monitor;
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:synced')");
$s->query_safe('COMMIT');
is(verifies_since($redis, $mon), 1,
	'a lock a replica confirmed is not vouched for: the commit asks');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:synced')");
$redis->cmd('DEL', 'tm:synced');
commit_fails($s, 'tm:synced', 'deleted, it fails the commit');
$s->quit;
$node4->stop;

done_testing();
