# Times that must stay bounded whatever the numbers: the longest lease a
# caller may ask for (365 days) held by one session while another waits;
# a lock key given an expiry of 9e18 ms by a foreign client; and Redis
# paused for writes (what a failover looks like) under a wait without
# limit.  Waiters neither retry in a hot loop nor wait for ever, views
# and functions keep working, and a statement whose commands Redis does
# not complete fails with 58030 instead of hanging.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('bounds', $redis,
	connect_timeout => '1s',
	command_timeout => '1500ms');
my $foreign = 'dead0000-1111-4222-8333-444455556666:1';

# EVALSHA calls Redis has run so far
sub evalsha
{
	my ($calls) = $redis->cmd('INFO', 'commandstats') =~ /cmdstat_evalsha:calls=(\d+)/;
	return $calls // 0;
}

# A bounded wait for a lock that stays busy: it returns false, and sends
# a few acquires, not one after another
sub bounded_wait
{
	my ($what, $key) = @_;
	my $before = evalsha();
	my ($rc, $out, $err) =
	  RlockTest::timed_psql($node, "SELECT rlock_try('$key', '2 s')");
	is("$rc $out", '0 f', "$what: a bounded wait ends, without the lock")
	  or diag($err);
	my $tries = evalsha() - $before;
	cmp_ok($tries, '<', 20, "$what: $tries acquires sent in the 2 s wait");
}

# the views and functions on such a lock
sub views_work
{
	my ($what, $key) = @_;
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT count(*) FROM rlock_locks WHERE expires_at > now() + interval '366 days'");
	is("$rc $out", '0 0', "$what: rlock_locks works, no time past the longest lease")
	  or diag($err);
	($rc, $out, $err) = $node->psql('postgres',
		"SELECT rlock_ttl('$key') >= interval '364 days'");
	is("$rc $out", '0 t', "$what: rlock_ttl() is long, not negative")
	  or diag($err);
}

#---- the longest lease ----

my $holder = $node->background_psql('postgres');
is($holder->query_safe("SELECT rlock_session_lock('tb:long', '365 days')"), '',
	'a lock with the longest lease');
bounded_wait('the longest lease', 'tb:long');
views_work('the longest lease', 'tb:long');

#---- an expiry no lease of rlock's would give ----

$redis->cmd('HSET', 'tb:far', $foreign, 1);
is($redis->cmd('PEXPIRE', 'tb:far', '9000000000000000000'), 1,
	'a foreign client sets an expiry of 9e18 ms');
bounded_wait('an expiry of 9e18 ms', 'tb:far');
views_work('an expiry of 9e18 ms', 'tb:far');

# a wait without limit on that key: shown in rlock_locks, and ended by
# the unlock message, not by a retry in a loop nor never
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
my $before = evalsha();
RlockTest::send_query($waiter, "SELECT rlock_lock('tb:far'), 'got it';");
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM rlock_locks WHERE key = 'tb:far' AND state = 'waiting'"
			) == 1;
		},
		10),
	'rlock_locks shows the waiter');
ok(RlockTest::wait_for_subscribers($redis, 'tb:far', 1, 10),
	'the waiter is subscribed');
$redis->cmd('DEL', 'tb:far');
$redis->cmd('PUBLISH', 'redisson_lock__channel:{tb:far}', '0');
my ($got) = RlockTest::collect($waiter);
like($got, qr/got it/, 'the unlock message ends the wait');
cmp_ok(evalsha() - $before, '<', 20, 'with a few acquires sent meanwhile');
$waiter->quit;

#---- Redis paused for writes ----

# CLIENT PAUSE WRITE holds every script back while the connection stays
# up and reads are answered: a wait without limit fails with 58030 once
# its commands went unanswered for command_timeout + connect_timeout,
# however often the worker connects again meanwhile
my $reconnects = $node->safe_psql('postgres', 'SELECT reconnects FROM rlock_stats');
$redis->cmd('CLIENT', 'PAUSE', 12000, 'WRITE');
for my $i (1, 2)
{
	my ($rc, $out, $err, $elapsed) =
	  RlockTest::timed_psql($node, "SELECT rlock_lock('tb:paused$i')");
	like($err, qr/ERROR:  58030: could not reach Redis for lock "tb:paused$i"/,
		"a wait without limit under CLIENT PAUSE WRITE fails with 58030 ($i)");
	like($err, qr/HINT:  Check that Redis is up and reachable/, "with a hint ($i)");
	cmp_ok($elapsed, '<', 1.5 + 1 + 1.5,
		"within command_timeout + connect_timeout ($elapsed s)");
}
my $made = $node->safe_psql('postgres', 'SELECT reconnects FROM rlock_stats') - $reconnects;
# at most one new connection per command timeout, for each of the two
# connections (the subscriber's goes with the command connection)
cmp_ok($made, '<=', 8,
	"the worker connected again $made times meanwhile, both connections counted");
$redis->cmd('CLIENT', 'UNPAUSE');
ok(RlockTest::wait_for_redis($node, 10), 'once Redis takes writes again, locks work');

# each new connection timed out in turn, more than a second after it was
# made: still one outage in the log
my $log = slurp_file($node->logfile);
my $lost = () = $log =~ /rlock lost its command connection/g;
my $again = () = $log =~ /rlock command connection to Redis at \S+ keeps failing soon after it is made/g;
is("$lost $again", '1 1',
	'the log says the connection was lost, then that it keeps failing, once each');

$holder->quit;
$node->stop;
done_testing();
