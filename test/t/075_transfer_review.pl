# Hand-offs by transfer (worker/transfer.c) where the first tests of it
# (074) did not look:
#
# - rlock connected as the Redis user doc/configuration.md documents
#   (both lines) less the optional PUBSUB NUMSUB: a transfer runs, the
#   waiter it grants commits, and the chain of transfers keeps
#   rlock.handoff_limit although the script cannot learn who listens:
#   with a passive subscriber on the lock's channel, no more than four
#   transfers in a row go without the lock being freed and its unlock
#   message published;
# - a waiter granted by a transfer that sets rlock.verify_at_commit to
#   off before its COMMIT (a superuser may) while the transfer is still
#   held back in Redis (CLIENT PAUSE), the holder's lock gone unannounced
#   (SWAPDB): the commit waits for the transfer's answer and fails with
#   40001, as the transfer found the holder gone and the waiter never
#   held the lock;
# - Redis's scripts flushed (SCRIPT FLUSH) before a transfer: the worker
#   loads them again and sends the transfer again, the waiter granted
#   commits (doc/failures.md: the user sees nothing of a flush), and the
#   lock went from one to the other without being freed.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::ACL;
use RlockTest::Redis;
use RlockTest::Resp;
use RlockTest::TLS;
use RlockTest::Transfer qw(plain_shas session line_up scripts_on chain);

plan skip_all => 'the hand-off does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

# the documented lines, the optional one without PUBSUB NUMSUB
my @acl = RlockTest::ACL::lines('data');
$acl[1] = [ grep { lc($_) ne '+pubsub|numsub' } @{ $acl[1] } ];
my $redis = RlockTest::Redis->start(acl => [ @acl[0, 1] ]);
# a window that a psql round trip between the lock and the COMMIT does
# not outlast; no watchdog renewal during the test; a command timeout
# that the pause below does not reach
my $node = RlockTest::node('xferreview', $redis,
	command_timeout => '10s',
	conf => [ "rlock.verify_window = '1s'", "rlock.watchdog_timeout = '10min'",
			  'rlock.handoff_limit = 4', 'log_min_messages = warning',
			  RlockTest::ACL::node_conf() ]);
ok(RlockTest::wait_for_redis($node, 15), 'rlock is connected as the documented user');
isnt($redis->cmd('ACL', 'DRYRUN', RlockTest::ACL::user(), 'PUBSUB', 'NUMSUB', 'c'), 'OK',
	'which may not ask PUBSUB NUMSUB');

my %sha = plain_shas(qw(acquire release transfer verify));

my @s = map { session($node) } 1 .. 3;

#---- a chain as the documented user, another client listening ----

my $key = 'review:chain';
$node->safe_psql('postgres', 'CREATE TABLE chain (n int); INSERT INTO chain VALUES (0)');
line_up($node, $key, undef, @s);
ok(RlockTest::wait_for_subscribers($redis, $key, 1, 10), 'the line subscribed');
my $other = RlockTest::Resp->connect($redis->port);
$other->call('SUBSCRIBE', "redisson_lock__channel:{$key}");
ok(RlockTest::wait_for_subscribers($redis, $key, 2, 10),
	'and one other client listens');

my $mon = $redis->monitor;
my $failed = chain($node, $key, 12, @s);
is($failed, '', 'every section commits');
is($node->safe_psql('postgres', 'SELECT n FROM chain'), 12,
	'twelve sections, the counter exact');
my $ran = scripts_on(\%sha, $key, $mon->drain(0.3));
like($ran, qr/transfer/, "the hand-offs went as transfers ($ran)");
unlike($ran, qr/(transfer (verify )?){5}/,
	'no more than rlock.handoff_limit transfers in a row while another client listens');
$other->call('UNSUBSCRIBE');

#---- a check before commit turned off after a transfer's grant ----

my ($a, $b) = @s;
$key = 'review:off';
line_up($node, $key, undef, $a, $b);
$mon = $redis->monitor;
# the holder's lock moves away unannounced, and the transfer waits in Redis
$redis->cmd('SWAPDB', 0, 1);
$redis->cmd('CLIENT', 'PAUSE', 2000, 'ALL');
my $paused = time();
$a->query_safe('COMMIT');
is($a->{stderr}, '', 'the holder commits: Redis announced nothing');
my ($out, $err) = RlockTest::collect($b);
is($out, 't', 'the waiter is granted at once');
$b->query('SET LOCAL rlock.verify_at_commit = off');
my $before_reply = time() - $paused < 1.5;
$b->query('COMMIT');
like($b->{stderr}, qr/40001.*lock "\Q$key\E" was lost/s,
	'its commit with the check off fails with 40001: the transfer found the holder gone');
ok($before_reply, 'the commit was made while the transfer was still held back');
$b->{stderr} = '';
$ran = scripts_on(\%sha, $key, $mon->drain(0.3));
like($ran, qr/^transfer\b/, "it was a transfer ($ran)");
is($redis->cmd('EXISTS', $key), 0, 'nothing was written where the lock was');
$redis->cmd('SWAPDB', 0, 1);
$redis->cmd('DEL', $key);

#---- the scripts flushed before a transfer ----

$key = 'review:flush';
line_up($node, $key, undef, $a, $b);
$mon = $redis->monitor;
$redis->cmd('SCRIPT', 'FLUSH');
$a->query_safe('COMMIT');
($out, $err) = RlockTest::collect($b);
is($out, 't', '[flush] the waiter is granted');
$b->query_safe('SELECT 1');
$b->query('COMMIT');
is($b->{stderr}, '', '[flush] and commits: the transfer was sent again');
$b->{stderr} = '';
$ran = scripts_on(\%sha, $key, $mon->drain(0.3));
like($ran, qr/^transfer transfer\b/, "[flush] refused, then sent again ($ran)");
unlike($ran, qr/acquire/, '[flush] nobody tried in between');
is($redis->cmd('EXISTS', $key), 0, '[flush] the lock is free at the end');

$_->quit for @s;
$node->stop;
done_testing();
