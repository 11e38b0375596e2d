# Redisson's wire format, exactly: the hash, its field and count, the
# lease, the channel (brace rule included) and the unlock message; and a
# Redisson-style client and rlock excluding and waking each other.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('wire', $redis);

# Redisson's acquire as a client would run it: the same keys and fields,
# our own script.  nil = acquired, otherwise the remaining TTL.
my $redisson_acquire = q{
if redis.call('exists', KEYS[1]) == 0
   or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
};
my $redisson_owner = '6f1c3e2a-9b0d-4c5e-8f7a-112233445566:57';

sub redisson_unlock
{
	my ($key, $channel) = @_;
	$redis->cmd('DEL', $key);
	$redis->cmd('PUBLISH', $channel, '0');
}

my $s1 = $node->background_psql('postgres');

# the hash, its field and count, the lease
$s1->query_safe("SELECT rlock_session_try('wire:a')");
is($redis->cmd('TYPE', 'wire:a'), 'hash', 'a lock is a hash');
my %fields = @{ $redis->cmd('HGETALL', 'wire:a') };
is(scalar(keys %fields), 2, 'with two fields');
is(delete $fields{mode}, 'write',
	'one "mode" = "write", which Redisson read-write locks wait on');
my ($owner) = keys %fields;
like($owner,
	qr/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}:\d+$/,
	'the field is <uuid v4>:<n>');
is($fields{$owner}, '1', 'the other holding the hold count');
my $pttl = $redis->cmd('PTTL', 'wire:a');
ok($pttl > 25_000 && $pttl <= 30_000, "watchdog lease of 30 s ($pttl ms)");

$redis->cmd('PEXPIRE', 'wire:a', 5000);
$s1->query_safe("SELECT rlock_session_try('wire:a')");
is($redis->cmd('HGET', 'wire:a', $owner), '2', 're-entry increments the count');
$pttl = $redis->cmd('PTTL', 'wire:a');
ok($pttl > 25_000, "re-entry resets the lease ($pttl ms)");

# the owner is per session: same instance uuid, another number
my $s2 = $node->background_psql('postgres');
$s2->query_safe("SELECT rlock_session_try('wire:b')");
my $owner2 = $redis->owners('wire:b')->[0];
my ($uuid1, $n1) = split /:/, $owner;
my ($uuid2, $n2) = split /:/, $owner2;
is($uuid2, $uuid1, 'sessions of one instance share its uuid');
isnt($n2, $n1, 'each session has its own number');
$s2->query_safe("SELECT rlock_session_release('wire:b')");

# a partial release resets the lease to that of the hold that remains
$s1->query_safe("SELECT rlock_session_try('wire:lease', '0', '1 hour')");
$s1->query_safe("SELECT rlock_session_try('wire:lease', '0', '10 s')");
$pttl = $redis->cmd('PTTL', 'wire:lease');
ok($pttl <= 10_000, "re-entry with a 10 s lease sets 10 s ($pttl ms)");
$s1->query_safe("SELECT rlock_session_release('wire:lease')");
$pttl = $redis->cmd('PTTL', 'wire:lease');
ok($pttl > 3_500_000, "after a partial release the lease is the remaining hold's hour ($pttl ms)");
is($redis->cmd('HGET', 'wire:lease', $owner), '1', 'count down to 1');
$s1->query_safe("SELECT rlock_session_release('wire:lease')");

# a full release deletes the key and publishes "0" on the lock's channel
my $sub = $redis->connect;
$sub->call('SUBSCRIBE', 'redisson_lock__channel:{wire:a}');
$s1->query_safe("SELECT rlock_session_release('wire:a')");
is($redis->cmd('HGET', 'wire:a', $owner), '1', 'a partial release decrements');
ok(!defined $sub->next_message(0.3), 'and publishes nothing');
$s1->query_safe("SELECT rlock_session_release('wire:a')");
is($redis->cmd('EXISTS', 'wire:a'), 0, 'the full release deletes the hash');
is_deeply($sub->next_message(5), [ 'redisson_lock__channel:{wire:a}', '0' ],
	'and publishes "0" on redisson_lock__channel:{wire:a}');

# a key with a brace keeps its hash tag: no extra braces in the channel
my $sub2 = $redis->connect;
$sub2->call('SUBSCRIBE', 'redisson_lock__channel:order:{42}');
$s1->query_safe("SELECT rlock_session_try('order:{42}')");
$s1->query_safe("SELECT rlock_session_release('order:{42}')");
is_deeply($sub2->next_message(5), [ 'redisson_lock__channel:order:{42}', '0' ],
	'brace rule: order:{42} publishes on redisson_lock__channel:order:{42}');

# a Redisson-style holder makes rlock_try return false ...
is( $redis->cmd('EVAL', $redisson_acquire, 1, 'wire:r', 30000,
		$redisson_owner),
	undef,
	'a Redisson-style client takes wire:r');
is($node->safe_psql('postgres', "SELECT rlock_try('wire:r')"),
	'f', 'rlock_try on a lock held by a Redisson-style client is false');

# ... and its unlock message wakes an rlock waiter, long before the lease
# (30 s) would have let it in
$s1->query_until(qr/waiting/,
	"\\echo waiting\nBEGIN;\nSELECT rlock_try('wire:r', '25 s');\nCOMMIT;\n");
ok(RlockTest::wait_for_subscribers($redis, 'wire:r', 1),
	'the waiting rlock subscribed to the channel');
my $t0 = time;
redisson_unlock('wire:r', 'redisson_lock__channel:{wire:r}');
my $out = $s1->query("SELECT 'done'");
my $elapsed = time - $t0;
like($out, qr/^t\n/, 'the waiter got the lock after the Redisson unlock');
cmp_ok($elapsed, '<', 5, "woken by the message, not the lease ($elapsed s)");
ok(RlockTest::wait_until(sub { $redis->cmd('HLEN', 'wire:r') == 0 }, 5),
	'and released it at the end of its statement');

# an rlock holder blocks a Redisson-style waiter and wakes it
$s1->query_safe("SELECT rlock_session_try('wire:j')");
my $waiter = $redis->connect;
$waiter->call('SUBSCRIBE', 'redisson_lock__channel:{wire:j}');
my $ttl = $redis->cmd('EVAL', $redisson_acquire, 1, 'wire:j', 30000,
	$redisson_owner);
ok(defined $ttl && $ttl > 0, "the Redisson-style client is told to wait ($ttl ms)");
$s1->query_safe("SELECT rlock_session_release('wire:j')");
is_deeply($waiter->next_message(5), [ 'redisson_lock__channel:{wire:j}', '0' ],
	'the rlock release wakes the Redisson-style waiter');
is( $redis->cmd('EVAL', $redisson_acquire, 1, 'wire:j', 30000,
		$redisson_owner),
	undef,
	'which then takes the lock');
$redis->cmd('DEL', 'wire:j');

# a hold that Redis lost: the release says so
$s1->query_safe("SELECT rlock_session_try('wire:lost')");
$redis->cmd('DEL', 'wire:lost');
my ($out2, $err2) = $s1->query("SELECT rlock_session_release('wire:lost')");
is($out2, 'f', 'releasing a lock Redis no longer has returns false');
like($s1->{stderr}, qr/WARNING:  lock "wire:lost" was no longer held in Redis/,
	'with a warning');
$s1->{stderr} = '';
is($s1->query_safe("SELECT rlock_held('wire:lost')"), '0',
	'and the session no longer counts it');

# nothing was left behind
$s1->quit;
ok(RlockTest::wait_until(sub { @{ $redis->cmd('KEYS', 'wire:*') } == 0 }, 10),
	'no key left in Redis');

done_testing();
