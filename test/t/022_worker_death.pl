# The worker dies while its commands are on the wire (Redis stalled, so
# they run only after it is gone).  SIGTERM: every backend waiting on it
# gets 55000 at once; the postmaster starts a new worker, which undoes what
# the dead one's late commands did: a grant nobody waits for is handed
# back, a re-entry and a release that failed leave Redis with the counts
# the sessions report; and it renews the holds it took over.  SIGKILL: the
# postmaster restarts the whole cluster; backends waiting for a lock or for
# Redis get a clear error instead of hanging; the lock granted by the late
# command, like every lock held before the crash, keeps its old owner, is
# never renewed and simply expires with its lease.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start;
# commands stay on the wire: the worker dies long before command_timeout
my $node = RlockTest::node('worker_death', $redis,
	command_timeout => '10s',
	conf => [ "rlock.watchdog_timeout = '3s'", 'restart_after_crash = on' ]);

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	return ($s, $s->query_safe('SELECT pg_backend_pid()'));
}

# Scripts Redis ran for $key, from the MONITOR lines in @lines, each as
# [client address, hold count asked for, 'acquire' or 'release'].  An
# acquire's count follows its keys, the lease and the owner; a mark for
# client-side tracking may come after it.
sub scripts_for
{
	my ($key, @lines) = @_;
	my @ran;
	for my $line (@lines)
	{
		next unless $line =~ /^[\d.]+ \[\d+ ([\d.:]+)\] "EVALSHA" (.*)$/;
		my ($client, @a) = ($1, $2 =~ /"((?:[^"\\]|\\.)*)"/g);
		next unless $a[2] eq $key;
		push @ran,
		  $a[-1] eq 'PUBLISH'
		  ? [ $client, $a[5], 'release' ]
		  : [ $client, $a[ 4 + $a[1] ], 'acquire' ];
	}
	return @ran;
}

sub redis_count
{
	my ($key) = @_;
	return join(',', @{ $redis->counts($key) });
}

# -- SIGTERM -------------------------------------------------------------------

my ($s1, $pid1) = session();
my ($s2, $pid2) = session();
my ($s3, $pid3) = session();
$s1->query_safe("SELECT rlock_session_try('wd:kept')");
$s3->query_safe("SELECT rlock_session_try('wd:rel'), rlock_session_try('wd:rel')");
my $mon = $redis->monitor;
$mon->drain(0.05);

$redis->freeze;
RlockTest::send_query($s1, "SELECT rlock_session_try('wd:kept');");
RlockTest::send_query($s2, "SELECT rlock_session_try('wd:late');");
RlockTest::send_query($s3, "SELECT rlock_session_release('wd:rel');");
ok( RlockTest::wait_until(
		sub { RlockTest::count_waiting($node, $pid1, $pid2, $pid3) == 3 }, 5),
	'a re-entry, an acquire and a release wait for a stalled Redis');
my $old = RlockTest::worker_pid($node);
kill 'TERM', $old;
my $t0 = time;
ok( RlockTest::wait_until(
		sub { RlockTest::count_active($node, $pid1, $pid2, $pid3) == 0 }, 5),
	'the three statements end when the worker is terminated');
my $elapsed = time - $t0;
cmp_ok($elapsed, '<', 1, "at once ($elapsed s)");
for my $s ($s1, $s2, $s3)
{
	my ($out, $err) = RlockTest::collect($s);
	like($err, qr/ERROR:  55000: rlock background worker is not running/,
		'with 55000');
}
$redis->thaw;

ok( RlockTest::wait_for_new_worker($node, $old),
	'the postmaster starts a new worker');
ok(RlockTest::wait_for_redis($node, 10), 'which serves requests');
my @late = scripts_for('wd:late', $mon->drain(0.3));
ok( @late == 2
	  && $late[0][2] eq 'acquire' && $late[0][1] eq '1'
	  && $late[1][2] eq 'release' && $late[1][1] eq '0'
	  && $late[0][0] ne $late[1][0],
	'Redis granted wd:late on the dead worker\'s connection after it died, '
	  . 'and the new worker released it');
is($redis->cmd('EXISTS', 'wd:late'), 0, 'so the late grant left nothing');
is(scalar $s2->query("SELECT rlock_held('wd:late')"), '0',
	'and the session holds nothing');
is(scalar $s1->query("SELECT rlock_held('wd:kept')") . ' / ' . redis_count('wd:kept'),
	'1 / 1', 'the failed re-entry left one hold, in the session and in Redis');
is(scalar $s3->query("SELECT rlock_held('wd:rel')") . ' / ' . redis_count('wd:rel'),
	'1 / 1', 'the failed release left one hold, in the session and in Redis');
ok(RlockTest::wait_for_renewal($redis, 'wd:kept', 5),
	'the new worker renews the holds it took over');
is(scalar $s1->query("SELECT rlock_session_release('wd:kept')"), 't',
	'and releases them');
is(scalar $s3->query("SELECT rlock_session_release('wd:rel')"), 't',
	'each with one release');
is_deeply($redis->cmd('KEYS', 'wd:*'), [], 'nothing is left');
undef $mon;

# -- SIGKILL -------------------------------------------------------------------

my $foreign = '0d0d0d0d-1111-4222-8333-444455556666:2';
$redis->cmd('HSET', 'wd:busy', $foreign, 1);
$redis->cmd('PEXPIRE', 'wd:busy', 60_000);
$s1->query_safe("SELECT rlock_session_try('wd:crash')");
ok(RlockTest::wait_for_renewal($redis, 'wd:crash', 5),
	'a lock held before the crash is renewed');

# two backends outside background_psql, whose end can be watched
my %psql;
for my $key ('wd:busy', 'wd:latecrash')
{
	my $sql = $key eq 'wd:busy' ? "SELECT rlock_lock('$key')" :
	  "SELECT rlock_session_try('$key')";
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>', \$err);
	$psql{$key} = { h => $h, out => \$out, err => \$err, sql => $sql };
	if ($key eq 'wd:busy')
	{
		ok(RlockTest::wait_for_subscribers($redis, 'wd:busy', 1),
			'a backend waits for a foreign lock');
		$redis->freeze;
	}
}
ok( RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE query = \$\$$psql{'wd:latecrash'}{sql}\$\$ AND wait_event_type = 'Extension'"
			) == 1;
		},
		5),
	'another backend waits for a stalled Redis');

kill 'KILL', RlockTest::worker_pid($node);
$t0 = time;
ok( RlockTest::wait_until(
		sub {
			!grep { RlockTest::still_running($_->{h}) } values %psql;
		},
		10),
	'both backends end when the worker is killed');
$elapsed = time - $t0;
note "they ended after $elapsed s";
$redis->thaw;
for my $key (sort keys %psql)
{
	$psql{$key}{h}->finish;
	like(${ $psql{$key}{err} },
		qr/terminating connection because of crash of another server process/,
		"the one waiting on $key is told why");
}

ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'wd:latecrash') == 1 }, 2),
	'Redis runs the dead worker\'s acquire once it resumes');
ok(RlockTest::expires_unrenewed($redis, [ 'wd:latecrash', 'wd:crash' ], 6),
	'that late grant, like the lock held before the crash, is never renewed '
	  . 'and expires with its lease');
ok(RlockTest::wait_back($node),
	'the cluster is back');
ok(RlockTest::wait_for_redis($node, 10), 'its new worker serves requests');
is_deeply($redis->cmd('HKEYS', 'wd:busy'), [$foreign],
	'the foreign lock the dead backend waited for is untouched');
eval { $_->quit } for $s1, $s2, $s3;

done_testing();
