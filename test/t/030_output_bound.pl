# A Redis that stops reading (frozen, or a network that holds every
# packet) while sessions keep asking: each statement gives up after 1 ms
# and the next one sends a new request.  What the worker has not been
# able to write waits in its memory; at most 4 MiB of it may wait on a
# connection, the rest of the requests wait in their slots, as when there
# is no connection.  Without that bound the worker grows by everything
# the sessions ask for within rlock.command_timeout.

use strict;
use warnings;

use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('outbound', $redis,
	command_timeout => '5s',
	conf => [ 'max_connections = 40', 'rlock.max_key_length = 8192' ]);
my $worker = RlockTest::worker_pid($node);

sub worker_status
{
	my ($field) = @_;
	open(my $fh, '<', "/proc/$worker/status") or return 0;
	while (<$fh>)
	{
		return $1 if /^\Q$field\E:\s+(\d+)/;
	}
	return 0;
}

# each request carries a 4 kB key, and a statement gives up after 1 ms
my $script = PostgreSQL::Test::Utils::tempdir . '/ask.sql';
open(my $fh, '>', $script) or die "$script: $!";
print $fh "SET statement_timeout = '1ms';\n";
print $fh "SELECT rlock_is_locked(repeat('k', 4000) || $_);\n" for 1 .. 50_000;
close $fh;

# statements given up so far: one line each in the sessions' stderr
my $dir = PostgreSQL::Test::Utils::tempdir;
my $gave_up = sub {
	my $n = 0;
	for my $i (1 .. 16)
	{
		$n += () = slurp_file("$dir/$i.err") =~ /statement timeout/g;
	}
	return $n;
};

my $before = worker_status('VmRSS');
my @sessions = map {
	IPC::Run::start(
		[ 'psql', '-X', '-q', '-f', $script, '-h', $node->host,
			'-p', $node->port, 'postgres' ],
		'>', '/dev/null', '2>', "$dir/$_.err")
} 1 .. 16;

# wait until the sessions ask, then stop Redis from reading
ok(RlockTest::wait_until(sub { $gave_up->() > 1000 }, 60),
	'the sessions are asking');
$redis->freeze;
my $start = $gave_up->();

# look at the worker until just before the command timeout would drop the
# connection (and free what waits on it)
my $max = 0;
my $t0 = time;
while (time - $t0 < 4)
{
	my $rss = worker_status('VmRSS');
	$max = $rss if $rss > $max;
	usleep(50_000);
}
my $asked = $gave_up->() - $start;
$_->kill_kill for @sessions;
$redis->thaw;

cmp_ok($asked, '>', 2000,
	"requests kept coming while Redis did not read ($asked given up)");
my $growth = $max - $before;
note("worker RSS $before kB before, at most $max kB while Redis did not read; $asked requests given up meanwhile");
cmp_ok($growth, '<', 24 * 1024,
	"the worker grew by $growth kB while Redis did not read, under 24 MB");
is(RlockTest::worker_pid($node), $worker, 'the worker is the same');
ok(RlockTest::wait_for_redis($node, 20), 'once Redis reads again, locks work');

$node->stop;
done_testing();
