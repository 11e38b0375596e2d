# The worker pipelines: it writes a request without waiting for the replies
# to earlier ones, and everything queued since its last wake-up goes out in
# one write.  The watchdog renews held locks in batches of 100.  Both are measured on the worker's output: bytes written and
# write(2) calls (/proc/<pid>/io: wchar, syscw).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('pipeline', $redis,
	command_timeout => '30s',
	conf => [
		'log_min_messages = warning', 'log_statement = none',
		"rlock.watchdog_timeout = '1500ms'"
	]);
my $worker = RlockTest::worker_pid($node);

sub io
{
	my ($field) = @_;
	open(my $fh, '<', "/proc/$worker/io") or die "cannot read /proc/$worker/io: $!";
	while (<$fh>)
	{
		return $1 if /^$field: (\d+)/;
	}
	die "no $field in /proc/$worker/io";
}
sub writes { return io('syscw') }
sub bytes_written { return io('wchar') }

# with Redis frozen no reply can come back: every request still goes out
# (an acquire command takes about 150 bytes on the wire)
$redis->freeze;
my $before = bytes_written();
my @s = map { $node->background_psql('postgres') } 1 .. 5;
for my $i (0 .. 4)
{
	$s[$i]->query_until(qr/sent/, "\\echo sent\nSELECT rlock_try('pipe:$i');\n");
}
ok(RlockTest::wait_until(sub { bytes_written() - $before >= 5 * 120 }, 10),
	'five requests were written while none was answered');
$redis->thaw;
for my $i (0 .. 4)
{
	like(scalar $s[$i]->query("SELECT 'next'"), qr/^t\n/,
		"request $i completes once Redis answers");
	$s[$i]->quit;
}

# the check before commit (rlock.verify_at_commit = on) goes the same way:
# five sessions commit while Redis is frozen, and all five checks are
# written before any is answered
my @c = map { $node->background_psql('postgres') } 1 .. 5;
for my $i (0 .. 4)
{
	$c[$i]->query_safe('BEGIN');
	$c[$i]->query_safe("SELECT rlock_try('pipe:check:$i')");
}
$redis->freeze;
$before = bytes_written();
for my $i (0 .. 4)
{
	$c[$i]->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
}
ok(RlockTest::wait_until(sub { bytes_written() - $before >= 5 * 100 }, 10),
	'five checks before commit were written while none was answered');
$redis->thaw;
for my $i (0 .. 4)
{
	is($c[$i]->query_safe("SELECT rlock_held('pipe:check:$i')"), '0',
		"commit $i went through once Redis answered");
	$c[$i]->quit;
}

# one transaction ending with many holds: one write for all the releases
my $h = $node->background_psql('postgres');
$h->query_safe('BEGIN');
$h->query_safe(
	"SELECT count(*) FROM generate_series(1, 40) i WHERE rlock_try('pipe:many:' || i)"
);
is(scalar @{ $redis->cmd('KEYS', 'pipe:many:*') }, 40, '40 locks held');
$before = writes();
$h->query_safe('COMMIT');
ok(RlockTest::wait_until(sub { @{ $redis->cmd('KEYS', 'pipe:many:*') } == 0 }),
	'the commit released all 40');
my $delta = writes() - $before;
cmp_ok($delta, '<=', 10, "in a few writes, not 40 ($delta)");
$h->quit;

# 150 watchdog locks: each renewal period costs two script calls, not 150
my $w = $node->background_psql('postgres');
$w->query_safe(
	"SELECT count(*) FROM generate_series(1, 150) i WHERE rlock_session_try('pipe:renew:' || i)"
);
ok(RlockTest::wait_for_renewal($redis, 'pipe:renew:1', 5), 'a renewal happened');
$redis->cmd('CONFIG', 'RESETSTAT');
ok(RlockTest::wait_for_renewal($redis, 'pipe:renew:1', 5), 'and another');
ok(RlockTest::wait_for_renewal($redis, 'pipe:renew:1', 5), 'and another');
my ($calls) = $redis->cmd('INFO', 'commandstats') =~ /cmdstat_evalsha:calls=(\d+)/;
cmp_ok($calls, '<=', 6,
	"two renewal periods of 150 locks took a few script calls, not 300 ($calls)");
ok(!grep({ !$redis->cmd('EXISTS', "pipe:renew:$_") } 1 .. 150),
	'and all 150 are still held');
$w->quit;

done_testing();
