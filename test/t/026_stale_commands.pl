# A command that was still in the network when the worker gave up on its
# connection must not run later.  A relay between rlock and Redis holds
# back an acquire (with a one-hour lease); the worker gives up on the
# connection after rlock.command_timeout, reconnects, takes the lock
# again for the session, which commits and releases it.  Then the relay
# delivers the old acquire, as a network that heals would.  Because the
# worker closed its old connection on the server side (CLIENT KILL ID)
# before sending anything on the new one, the old acquire cannot run and
# no lock is left behind.  With CLIENT KILL refused by an ACL the same
# sequence leaves an orphan lock for its whole lease: the worker says so
# in the log once.
#
# A client id names a connection only on the server process that gave it.
# When rlock moves to another Redis server, whose own clients may have
# the same number, the fence must leave them alone.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Proxy;

plan skip_all => 'the relay reads the plain protocol: not over TLS'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $relay = RlockTest::Proxy->start($redis->port);
my $node = RlockTest::node('stale', $redis,
	command_timeout => '1s',
	conf => ["rlock.port = " . $relay->port]);
ok(RlockTest::wait_for_redis($node, 10), 'rlock works through the relay');

# Run the sequence on $key; returns what became of the held acquire.
sub stale_acquire
{
	my ($key) = @_;
	is($relay->hold('rlock_command'), 1,
		'the relay holds back what the command connection sends');
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT rlock_try('$key', '0', '1 h')"), 't',
		'the acquire is taken again on a new connection after the deadline');
	$s->query_safe('COMMIT');
	$s->quit;
	ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $key) == 0 }, 5),
		'the commit released it');
	return $relay->deliver;
}

is(stale_acquire('stale:a'), 'closed',
	'the old connection was closed by Redis before its acquire arrived');
is($redis->cmd('EXISTS', 'stale:a'), 0, 'so no lock is left behind');

# the same with the fence refused
$redis->cmd('ACL', 'SETUSER', 'default', '-client|kill');
$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'rlock worker'");
ok(RlockTest::wait_for_redis($node, 20), 'a new worker connects');
is(stale_acquire('stale:b'), 'answered',
	'without CLIENT KILL the old acquire runs when it arrives');
cmp_ok($redis->cmd('PTTL', 'stale:b'), '>', 3_000_000,
	'and leaves an orphan lock for its whole lease');
ok( RlockTest::wait_until(
		sub {
			slurp_file($node->logfile) =~
			  /rlock could not close its earlier connections to Redis/;
		},
		5),
	'which the worker warned about in the log');
$redis->cmd('ACL', 'SETUSER', 'default', '+client|kill');
$redis->cmd('DEL', 'stale:b');

# another server, where a foreign client has the id of rlock's last
# connection on the first one
my $last_id = $redis->client_id('rlock_command');
ok($last_id, "rlock's command connection is client $last_id");
my $other = RlockTest::Redis->start;
my %foreign;
while (1)
{
	my $c = $other->connect;
	my $id = $c->call('CLIENT', 'ID');
	$foreign{$id} = $c;
	last if $id >= $last_id + 1;
}
ok(exists $foreign{$last_id},
	"on the other server a foreign client is client $last_id too");
$node->append_conf('postgresql.conf', 'rlock.port = ' . $other->rlock_port);
$node->reload;
ok( RlockTest::wait_until(
		sub { defined $other->client_id('rlock_command') }, 10),
	'rlock moves to the other server');
is($node->safe_psql('postgres', "SELECT rlock_try('stale:c')"), 't',
	'and works there');
my @dead = grep { !eval { $foreign{$_}->call('PING') eq 'PONG' } }
  sort { $a <=> $b } keys %foreign;
is_deeply(\@dead, [], 'no foreign client there was closed by the fence');

$node->stop;
$relay->stop;
$redis->stop;
$other->stop;
done_testing();
