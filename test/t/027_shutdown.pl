# Shutting PostgreSQL down with sessions that hold locks with hour-long
# leases.  A fast shutdown ends the sessions and the worker at the same
# moment; the worker stays long enough to send the releases the sessions
# hand it as they exit, so no lock outlives the server.  An immediate
# shutdown (like a crash) runs no exit code: the locks stay until their
# leases end, under an owner that no restarted instance will ever renew.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::TLS;

plan skip_all => 'a shutdown does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('shutdown', $redis);

# sessions holding locks in both scopes, one of them mid-transaction
sub take_locks
{
	my ($tag) = @_;
	my @sessions;
	for my $i (1 .. 4)
	{
		my $s = $node->background_psql('postgres', on_error_stop => 0);
		$s->query_safe("SELECT rlock_session_try('sd:$tag:s$i', '0', '1 h')");
		$s->query_safe('BEGIN');
		$s->query_safe("SELECT rlock_try('sd:$tag:x$i', '0', '1 h')");
		push @sessions, $s;
	}
	is(scalar @{ $redis->cmd('KEYS', "sd:$tag:*") }, 8,
		"four sessions hold eight locks ($tag)");
	return @sessions;
}

my @sessions = take_locks('fast');
$node->stop('fast');
is_deeply($redis->cmd('KEYS', 'sd:fast:*'), [],
	'after a fast shutdown no lock is left in Redis');
$_->quit for @sessions;

$node->start;
ok(RlockTest::wait_for_redis($node, 10), 'the restarted server serves locks');
my $old_owner = $node->safe_psql('postgres',
	'SELECT instance_owner FROM rlock_status()');

@sessions = take_locks('immediate');
$node->stop('immediate');
is(scalar @{ $redis->cmd('KEYS', 'sd:immediate:*') }, 8,
	'after an immediate shutdown the locks are still there');
cmp_ok($redis->cmd('PTTL', 'sd:immediate:s1'), '>', 3_000_000,
	'each with the rest of its lease');
$_->quit for @sessions;

$node->start;
ok(RlockTest::wait_for_redis($node, 10), 'the server comes back');
isnt($node->safe_psql('postgres', 'SELECT instance_owner FROM rlock_status()'),
	$old_owner, 'under a new owner, which never renews or releases the old locks');
my $fields = $redis->owners('sd:immediate:s1');
like($fields->[0], qr/^\Q$old_owner\E:/, 'the old lock still names the old owner');

$node->stop;
$redis->stop;
done_testing();
