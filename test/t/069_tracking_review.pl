# The check before commit without a round trip, tried where it can go
# wrong: a commit must not be vouched for by client-side tracking unless
# Redis tracks the lock's key for the worker's current arming and every
# change of it would have been announced.  Each part runs against its own
# Redis (the helpers find rlock's connections by name), some through a
# relay that delays or loses one connection's bytes as a network would.
#
# - a lock evicted under maxmemory by a command of rlock's own command
#   connection (with NOLOOP, which rlock does not use, Redis would
#   announce nothing to the client whose command made the change, and the
#   eviction runs in that command);
# - the same with keys dropped from Redis's tracking table
#   (tracking-table-max-keys) in a command of rlock's;
# - a renewal sent behind a re-entering acquire of the same lock: the
#   grant read afterwards must not count as tracked, the renewal's
#   PEXPIRE having made Redis forget the key;
# - tracking switched on while its OK was on the way and the subscriber
#   it redirects to was replaced: Redis sends the announcements to a
#   client that is gone;
# - the same with CLIENT TRACKING ... REDIRECT reaching Redis after that
#   subscriber went: refused, and tracking must still come back;
# - rlock.client_tracking turned on while the subscriber was made with it
#   off;
# - the worker's table of tracked keys after many distinct keys;
# - a subscriber whose bytes stop arriving without a word;
# - a server that sends invalidations nobody could send: twenty thousand
#   "every key" at once, 300,000 keys in one, keys that are no strings,
#   one while tracking is off.  The worker must neither die nor spin nor
#   grow, and go on catching a deleted lock;
# - a lock kind whose acquire does not read its key again after writing it
#   (the test kind "ticket", built with make RLOCK_TEST_KINDS=1; skipped
#   otherwise): Redis tracks nothing for it, so nothing may vouch for it.

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Tracking qw(command_field armed commit_fails);
use RlockTest::Hostile;
use RlockTest::Proxy;

plan skip_all => 'the relay reads the plain protocol: not over TLS'
  if RlockTest::TLS::everywhere();

my $acquire_sha = sha1_hex(RlockTest::script_text(
		($ENV{TESTDIR} // '.') . '/src/kinds/plain/acquire.lua'));
my $renew_sha = sha1_hex(RlockTest::script_text(
		($ENV{TESTDIR} // '.') . '/src/kinds/plain/renew.lua'));

# Does the subscriber $id of $redis follow the invalidation channel?
sub subscribed
{
	my ($redis, $id) = @_;
	my ($line) = grep { /^id=\Q$id\E / } split /\n/, $redis->cmd('CLIENT', 'LIST');
	return defined $line && $line =~ / sub=([1-9]\d*) /;
}

#---- evicted by a command of rlock's own ----

my $redis = RlockTest::Redis->start;
# a window long enough that psql's round trips between the lock and the
# COMMIT leave the worker fresh (the default is 1 ms)
my $node = RlockTest::node('review', $redis,
	conf => ["rlock.verify_window = '1s'"]);
ok(RlockTest::wait_for_redis($node, 15), 'rlock is connected');
ok(armed($redis), 'tracking is on, redirected to the subscriber');

my $s = $node->background_psql('postgres', on_error_stop => 0);
my $t = $node->background_psql('postgres', on_error_stop => 0);

$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('rv:evicted', '0', '1 min')");
# only keys with a lease may go: the filler stays, every lock goes
$redis->cmd('CONFIG', 'SET', 'maxmemory-policy', 'volatile-ttl');
my ($used) = $redis->cmd('INFO', 'memory') =~ /used_memory:(\d+)/;
$redis->cmd('CONFIG', 'SET', 'maxmemory', $used + 4 * 1024 * 1024);
my ($evicted_before) = $redis->cmd('INFO', 'stats') =~ /evicted_keys:(\d+)/;
# a short command that makes an 8 MB value: under the limit when Redis
# read it (so it evicts nothing), over it once it ran; the next command
# anybody sends evicts, and it is one of rlock's command connection
$redis->cmd('SETRANGE', 'rv:filler', 8 * 1024 * 1024, 'x');
$t->query_safe("SELECT rlock_is_locked('rv:trigger')");
is($redis->cmd('EXISTS', 'rv:evicted'), 0, 'the lock was evicted');
my ($evicted_after) = $redis->cmd('INFO', 'stats') =~ /evicted_keys:(\d+)/;
cmp_ok($evicted_after, '>', $evicted_before, 'by maxmemory');
commit_fails($s, 'rv:evicted',
	'a lock evicted in a command of rlock\'s own fails the commit');
$redis->cmd('CONFIG', 'SET', 'maxmemory', 0);
$redis->cmd('DEL', 'rv:filler');
$redis->cmd('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');

#---- dropped from the tracking table in a command of rlock's own ----

# Redis keeps at most tracking-table-max-keys keys tracked, and drops
# others at random at the start of a command, or in its cron, announcing
# each like a change; dropped in one of rlock's commands, no announcement
# reaches rlock.  Twenty keys read besides the lock, so that the lock is
# among those dropped in most rounds; five rounds.
for my $round (1 .. 5)
{
	my $key = "rv:table:$round";
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT rlock_try('$key', '0', '1 min')");
	$t->query_safe(
		"SELECT count(*) FROM generate_series(1, 20) i WHERE rlock_is_locked('rv:read:$round:' || i)"
	);
	$redis->cmd('CONFIG', 'SET', 'tracking-table-max-keys', 1);
	$t->query_safe("SELECT rlock_is_locked('rv:trigger')");
	$redis->cmd('CONFIG', 'SET', 'tracking-table-max-keys', 0);
	$redis->cmd('DEL', $key);
	commit_fails($s, $key,
		"round $round: a lock deleted after Redis stopped tracking it in a command of rlock's fails the commit"
	);
}

#---- the table of tracked keys ----

# The bytes of the worker's memory context $name, from the server log
# (pg_log_backend_memory_contexts)
sub worker_context_bytes
{
	my ($node, $name) = @_;
	my $pid = RlockTest::worker_pid($node);
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	my $bytes;
	RlockTest::wait_until(
		sub {
			my $log = slurp_file($node->logfile, $offset);
			$bytes = $1 if $log =~ /\Q$name\E: (\d+) total in/;
			return defined $bytes;
		},
		10);
	return $bytes;
}

$t->query_safe(
	"SELECT count(*) FROM generate_series(1, 1000) i WHERE rlock_session_try('rv:many:' || i) AND rlock_session_release('rv:many:' || i)"
);
my $small = worker_context_bytes($node, 'rlock tracked keys');
ok(defined $small, "the worker's table of tracked keys: $small bytes after 1000 keys");
$t->query_safe(
	"SELECT count(*) FROM generate_series(1001, 21000) i WHERE rlock_session_try('rv:many:' || i) AND rlock_session_release('rv:many:' || i)"
);
my $large = worker_context_bytes($node, 'rlock tracked keys');
cmp_ok($large, '<=', 2 * $small,
	"20000 more keys taken and released one at a time leave it about as large ($large bytes)");

#---- rlock.client_tracking turned on after the subscriber was made ----

$node->safe_psql('postgres',
	"ALTER SYSTEM SET rlock.client_tracking = off; SELECT pg_reload_conf()");
ok(RlockTest::wait_until(sub { command_field($redis, 'flags') !~ /t/ }, 15),
	'rlock.client_tracking = off turns tracking off');
my $sub_id = $redis->client_id('rlock_subscriber');
$redis->cmd('CLIENT', 'KILL', 'ID', $sub_id);
ok( RlockTest::wait_until(
		sub {
			my $id = $redis->client_id('rlock_subscriber');
			defined $id && $id != $sub_id;
		},
		15),
	'the subscriber is made again while it is off');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET rlock.client_tracking; SELECT pg_reload_conf()");
ok(armed($redis), 'turned on again, tracking comes back');

$s->quit;
$t->quit;
$node->stop;

#---- a renewal behind a re-entering acquire ----

# The relay holds what the command connection sends until a renewal of
# the lock was sent behind the acquire that re-enters it; Redis then runs
# the acquire (tracked) and the renewal (whose PEXPIRE untracks the key,
# announcing nothing to rlock); the grant is read after the renewal was
# sent.
my $redis2 = RlockTest::Redis->start;
my $proxy2 = RlockTest::Proxy->start($redis2->port);
my $node2 = RlockTest::node('renewal', $redis2,
	command_timeout => '5s',
	conf => [
		"rlock.port = " . $proxy2->port,
		"rlock.verify_window = '1s'",
		"rlock.verify_margin = '100ms'",
		"rlock.watchdog_timeout = '3s'" ]);
ok(RlockTest::wait_for_redis($node2, 15), 'rlock is connected through the relay');
ok(armed($redis2), 'tracking is on');
my $r = $node2->background_psql('postgres', on_error_stop => 0);
$r->query_safe("SELECT rlock_session_try('rv:renewed')");
$r->query_safe('BEGIN');
is($proxy2->hold('rlock_command'), 1,
	'the relay holds back what the command connection sends');
RlockTest::send_query($r, "SELECT rlock_try('rv:renewed');");
ok( RlockTest::wait_until(
		sub {
			$proxy2->held_count($acquire_sha) >= 1
			  && $proxy2->held_count($renew_sha) >= 1;
		},
		10),
	'a renewal of the lock was sent behind the acquire that re-enters it');
is($proxy2->resume, 'resumed', 'both reach Redis');
my ($out) = RlockTest::collect($r);
like($out, qr/^t$/m, 'the lock is re-entered');
is_deeply($redis2->counts('rv:renewed'), [2], 'Redis counts two holds');
$redis2->cmd('DEL', 'rv:renewed');
commit_fails($r, 'rv:renewed',
	'a lock deleted after a renewal that followed its acquire fails the commit');

#---- a subscriber whose bytes are lost ----

# Both connections stay open; what Redis sends the subscriber is lost on
# the way (a middlebox that dropped the flow).  TCP keepalive finds that
# out after some 30 s; until then nothing says announcements are missing.
is($proxy2->mute_replies('rlock_subscriber'), 1,
	'what Redis sends the subscriber is lost from now on');
$r->query_safe('BEGIN');
$r->query_safe("SELECT rlock_try('rv:muted', '0', '1 min')");
$redis2->cmd('DEL', 'rv:muted');
commit_fails($r, 'rv:muted',
	'a lock deleted while announcements cannot arrive fails the commit');
$r->quit;
$node2->stop;

#---- tracking switched on for a subscriber that went meanwhile ----

# The relay holds what Redis answers the command connection.  The
# subscriber is killed: the worker makes another and asks Redis to
# redirect to it, which Redis does, its OK held in the relay.  That
# subscriber is killed too, and a third one subscribes before the OK
# arrives.  Redis's invalidations now go to the second, which is gone.
my $redis3 = RlockTest::Redis->start;
my $proxy3 = RlockTest::Proxy->start($redis3->port);
my $node3 = RlockTest::node('redirect', $redis3,
	command_timeout => '5s',
	conf => [ "rlock.port = " . $proxy3->port, "rlock.verify_window = '1s'" ]);
ok(RlockTest::wait_for_redis($node3, 15), 'rlock is connected through the relay');
ok(armed($redis3), 'tracking is on');
my $sub1 = $redis3->client_id('rlock_subscriber');
is($proxy3->hold_replies('rlock_command'), 1,
	'the relay holds back what Redis answers the command connection');
$redis3->cmd('CLIENT', 'KILL', 'ID', $sub1);
my $sub2;
ok( RlockTest::wait_until(
		sub {
			$sub2 = $redis3->client_id('rlock_subscriber');
			defined $sub2 && $sub2 != $sub1
			  && command_field($redis3, 'redir') eq $sub2;
		},
		10),
	'a new subscriber, and Redis redirects tracking to it');
$redis3->cmd('CLIENT', 'KILL', 'ID', $sub2);
my $sub3;
ok( RlockTest::wait_until(
		sub {
			$sub3 = $redis3->client_id('rlock_subscriber');
			defined $sub3 && $sub3 != $sub2 && subscribed($redis3, $sub3);
		},
		10),
	'that one is killed too, and a third subscribes');
# the third's confirmation reaches the worker at once, its command
# connection's answers are held: let the worker read it first
usleep(500_000);
is($proxy3->resume_replies, 'resumed', 'the command connection\'s answers arrive');
my $q = $node3->background_psql('postgres', on_error_stop => 0);
$q->query_safe('BEGIN');
$q->query_safe("SELECT rlock_try('rv:redirected', '0', '1 min')");
$redis3->cmd('DEL', 'rv:redirected');
commit_fails($q, 'rv:redirected',
	'a lock deleted while tracking redirects to a subscriber that is gone fails the commit');
ok(armed($redis3), 'tracking comes back, redirected to the subscriber there is');
$q->quit;
$node3->stop;

#---- the redirection refused: the subscriber it names is gone ----

# The relay holds what the command connection sends: CLIENT TRACKING ...
# REDIRECT to the second subscriber reaches Redis after it was killed,
# and Redis refuses it.  Nothing was wrong with tracking itself.
my $redis4 = RlockTest::Redis->start;
my $proxy4 = RlockTest::Proxy->start($redis4->port);
my $node4 = RlockTest::node('refused', $redis4,
	command_timeout => '5s',
	conf => [ "rlock.port = " . $proxy4->port ]);
ok(RlockTest::wait_for_redis($node4, 15), 'rlock is connected through the relay');
ok(armed($redis4), 'tracking is on');
my $first = $redis4->client_id('rlock_subscriber');
is($proxy4->hold('rlock_command'), 1,
	'the relay holds back what the command connection sends');
$redis4->cmd('CLIENT', 'KILL', 'ID', $first);
my $second;
ok( RlockTest::wait_until(
		sub {
			$second = $redis4->client_id('rlock_subscriber');
			defined $second && $second != $first
			  && $proxy4->held_count('TRACKING') >= 2;
		},
		10),
	'a new subscriber, and tracking redirected to it asked for (held)');
$redis4->cmd('CLIENT', 'KILL', 'ID', $second);
ok( RlockTest::wait_until(
		sub {
			my $id = $redis4->client_id('rlock_subscriber');
			defined $id && $id != $second && subscribed($redis4, $id);
		},
		10),
	'that one is killed too, and a third subscribes');
is($proxy4->resume, 'resumed', 'Redis gets the redirection to the second');
ok(armed($redis4), 'tracking comes back, redirected to the third');
unlike(slurp_file($node4->logfile), qr/Redis refused client-side tracking/,
	'and no refusal of tracking is logged: Redis allows it');
$node4->stop;

#---- a hostile server's invalidations ----

my $redis5 = RlockTest::Redis->start;
my $hostile = RlockTest::Hostile->start($redis5->port);
my $node5 = RlockTest::node('hostile', $redis5,
	conf => [ "rlock.port = " . $hostile->port, "rlock.verify_window = '1s'" ]);
ok(RlockTest::wait_for_redis($node5, 15), 'rlock is connected through the relay');
ok(armed($redis5), 'tracking is on');
my $worker = RlockTest::worker_pid($node5);

sub worker_proc
{
	my ($file, $field) = @_;
	open(my $fh, '<', "/proc/$worker/$file") or return 0;
	my $text = join('', <$fh>);
	return $text =~ /^VmRSS:\s+(\d+)/m ? $1 : 0 if $field eq 'rss';
	my @f = split / /, $text;
	return $f[13] + $f[14];    # utime + stime, in clock ticks
}

my $h = $node5->background_psql('postgres', on_error_stop => 0);
sub still_catches
{
	my ($key, $what) = @_;
	$h->query_safe('BEGIN');
	$h->query_safe("SELECT rlock_try('$key', '0', '1 min')");
	$redis5->cmd('DEL', $key);
	commit_fails($h, $key, $what);
}
my $head = "*3\r\n\$7\r\nmessage\r\n\$20\r\n__redis__:invalidate\r\n";
my $rss = worker_proc('status', 'rss');
$hostile->inject('rlock_subscriber', ($head . "\$-1\r\n") x 20000);
still_catches('rv:nil', 'after 20,000 "every key": a deleted lock fails the commit');
my $cpu = worker_proc('stat', 'cpu');
usleep(1_000_000);
cmp_ok(worker_proc('stat', 'cpu') - $cpu, '<', 20,
	'and the worker is idle a moment later');
$hostile->inject_bulks('rlock_subscriber', $head . "*300000\r\n", 300000, 20);
ok(RlockTest::wait_for_redis($node5, 15), 'after 300,000 keys in one: locks work');
still_catches('rv:huge', 'and a deleted lock fails the commit');
$hostile->inject('rlock_subscriber', $head . "*1\r\n:5\r\n");
$hostile->inject('rlock_subscriber', $head . "*1\r\n*1\r\n\$1\r\nk\r\n");
ok(armed($redis5), 'after keys that are no strings: tracking is on again');
still_catches('rv:malformed', 'and a deleted lock fails the commit');
$node5->safe_psql('postgres',
	"ALTER SYSTEM SET rlock.client_tracking = off; SELECT pg_reload_conf()");
ok(RlockTest::wait_until(sub { command_field($redis5, 'flags') !~ /t/ }, 15),
	'tracking off');
$hostile->inject('rlock_subscriber', $head . "*1\r\n\$6\r\nrv:off\r\n");
still_catches('rv:off', 'an invalidation nobody asked for: a deleted lock fails the commit');
is(RlockTest::worker_pid($node5), $worker, 'the same worker throughout');
cmp_ok(worker_proc('status', 'rss'), '<', $rss + 64 * 1024,
	'within 64 MB of what it had');
$h->quit;
$node5->stop;

#---- a kind that does not re-read its key ----

my $redis6 = RlockTest::Redis->start;
my $node6 = RlockTest::node('kind', $redis6,
	conf => ["rlock.verify_window = '1s'"]);
my ($rc) = $node6->psql('postgres',
	"CREATE FUNCTION ticket_try(text, interval, boolean) RETURNS boolean
	   AS 'rlock', 'rlock_test_ticket_try' LANGUAGE C");
SKIP:
{
	skip 'rlock was built without RLOCK_TEST_KINDS=1', 2 if $rc != 0;
	ok(armed($redis6), 'tracking is on');
	my $k = $node6->background_psql('postgres', on_error_stop => 0);
	$k->query_safe('BEGIN');
	$k->query_safe("SELECT ticket_try('rv:ticket', '0', false)");
	$redis6->cmd('DEL', 'rlock_ticket_lock:{rv:ticket}');
	commit_fails($k, 'rv:ticket',
		'a lock of a kind whose acquire does not read its key again: deleted, it fails the commit');
	$k->quit;
}
$node6->stop;

done_testing();
