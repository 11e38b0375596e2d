# Servers rlock cannot keep locks on: a Redis Cluster node (keys of other
# slots would be answered MOVED) and a Redis Sentinel (no data at all).
# The handshake finds out (INFO server, redis_mode or Valkey's
# server_mode): the connection is
# not made ready, rlock_status() says why, requests fail with 58030 and
# the reason within rlock.connect_timeout, and pointing rlock.host at a
# plain Redis is enough to recover.  (A replica is refused the same way:
# test 011.)

use strict;
use warnings;

use File::Temp ();
use POSIX ();
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

my $redis = RlockTest::Redis->start;
# the cluster bus gets a free port of its own (port + 10000 may not exist)
my $cluster = RlockTest::Redis->start(
	args => [
		'--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
		'--cluster-port', RlockTest::free_port() ]);
my $node = RlockTest::node('kinds', $cluster,
	connect_timeout => '1s',
	command_timeout => '1s');

sub status
{
	return $node->safe_psql('postgres',
		"SELECT command_connection || ' ' || coalesce(last_error, '') FROM rlock_status()");
}

# $what is refused with $why: in rlock_status() and in a request's error
sub refused
{
	my ($what, $why) = @_;
	ok(RlockTest::wait_until(sub { status() =~ /^(?!ready).* \Q$why\E/ }, 10),
		"$what: not ready, and rlock_status() says why")
	  or diag(status());
	my ($rc, $out, $err, $took) =
	  RlockTest::timed_psql($node, "SELECT rlock_try('kinds:k')");
	like($err,
		qr/ERROR:  58030: could not reach Redis for lock "kinds:k"\n.*DETAIL:  No usable connection to Redis at \S+: \Q$why\E/,
		"$what: a lock fails with 58030 and the reason");
	cmp_ok($took, '<', 1 + 0.5, "$what: within rlock.connect_timeout ($took s)");
}

refused('a Redis Cluster node',
	'the server runs in cluster mode: set rlock.topology to cluster, with the node in rlock.nodes'
);

# Sentinel speaks plain TCP here (the suite's TLS round gives it no TLS)
SKIP:
{
	skip 'Sentinel without TLS', 3 if RlockTest::TLS::everywhere();
	my $dir = File::Temp::tempdir(CLEANUP => 1);
	my $port = RlockTest::free_port();
	open(my $fh, '>', "$dir/sentinel.conf") or die "$dir/sentinel.conf: $!";
	print $fh "port $port\nbind 127.0.0.1\ndir $dir\n",
	  "sentinel monitor main 127.0.0.1 ", $redis->port, " 1\n";
	close $fh;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>>', "$dir/sentinel.log");
		open(STDERR, '>&', \*STDOUT);
		exec('redis-sentinel', "$dir/sentinel.conf") or POSIX::_exit(1);
	}
	RlockTest::wait_until(
		sub { eval { RlockTest::Resp->connect($port)->call('PING') } }, 10)
	  or die 'redis-sentinel did not start';
	$node->append_conf('postgresql.conf', "rlock.port = $port\n");
	$node->reload;
	refused('a Redis Sentinel',
		'the server is a Redis Sentinel, not a Redis server: point rlock.host at the primary it monitors'
	);
	kill 'TERM', $pid;
	waitpid($pid, 0);
}

# pointed at a plain Redis: locks work
$node->append_conf('postgresql.conf', 'rlock.port = ' . $redis->rlock_port . "\n");
$node->reload;
ok(RlockTest::wait_for_redis($node, 10), 'pointed at a standalone Redis, locks work');
# Valkey's own version, not the Redis release it keeps in redis_version
my $info = $redis->cmd('INFO', 'server');
my $version = $info =~ /^valkey_version:(\S+)/m ? "valkey $1" : ($info =~ /^redis_version:(\S+)/m)[0];
is($node->safe_psql('postgres', 'SELECT redis_version FROM rlock_status()'),
	$version, "rlock_status() shows the server's version ($version)");

$node->stop;
done_testing();
