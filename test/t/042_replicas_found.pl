# A standalone primary with rlock.sync_replicas = auto (the default): no
# replica, no waiting for one; a replica attached later is found (the
# command connection asks ROLE every 10 s while there is none), and from
# then on a granted lock is on the replica when it is granted.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'finding replicas does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('found', $redis);

sub status
{
	return $node->safe_psql('postgres', "SELECT $_[0] FROM rlock_status()");
}

ok(RlockTest::wait_for_redis($node, 15), 'rlock reaches the primary');
is(status('sync_connection'), 'unused', 'no replica: the sync connection is not used');
is(status('replicas'), '0', 'rlock_status: no replica');

my $replica = $redis->start_replica;
ok(RlockTest::wait_until(sub { status('sync_connection') eq 'ready' }, 15),
	'rlock finds it within the 10 s between two looks, and waits for it now');
is(status('replicas'), '1', 'rlock_status: one replica');

my $s = $node->background_psql('postgres');
is($s->query_safe("SELECT rlock_session_try('found:k')"), 't', 'a lock is granted');
is($replica->cmd('EXISTS', 'found:k'), 1, 'the replica had it when it was granted');
$s->quit;

$node->stop;
$replica->stop;
$redis->stop;
done_testing();
