# The check before commit without a round trip, attacked where its marks
# and the worker's bookkeeping of them could be fooled: a commit must not
# trust a lock that was removed before the worker's freshness point.
#
# - a worker replaced while a transaction holds a tracked lock: the new
#   worker numbers its armings afresh, and a hold the old one tracked
#   must not pass for one the new one tracks;

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

my $renew_sha = sha1_hex(RlockTest::script_text(
		($ENV{TESTDIR} // '.') . '/src/kinds/plain/renew.lua'));
my $verify_sha = sha1_hex(RlockTest::script_text(
		($ENV{TESTDIR} // '.') . '/src/kinds/plain/verify.lua'));

# What CLIENT LIST says of rlock's command connection on $redis
sub command_field
{
	my ($redis, $field) = @_;
	my ($line) = grep { / name=rlock_command / } split /\n/,
	  $redis->cmd('CLIENT', 'LIST');
	return defined $line && $line =~ / \Q$field\E=(\S+)/ ? $1 : '';
}

# Tracking is on, redirected to the subscriber rlock has now
sub armed
{
	my ($redis) = @_;
	return RlockTest::wait_until(
		sub {
			my $sub = $redis->client_id('rlock_subscriber') // -2;
			command_field($redis, 'flags') =~ /t/
			  && command_field($redis, 'redir') eq $sub;
		},
		15);
}

# A commit of $s that must fail because $key was lost, 100 ms after the
# change (an announcement that arrives is handled by then)
sub commit_fails
{
	my ($s, $key, $what) = @_;
	$s->query_safe('SELECT pg_sleep(0.1)');
	$s->query('COMMIT');
	my $ok = like($s->{stderr}, qr/lock "\Q$key\E" was lost/, $what);
	$s->{stderr} = '';
	return $ok;
}

# Read the MONITOR stream $mon until a line matches $re (bounded)
sub monitor_until
{
	my ($mon, $re, $seconds) = @_;
	return RlockTest::wait_until(
		sub {
			my $line = eval { $mon->read_reply(0.1) };
			defined $line && $line =~ $re;
		},
		$seconds);
}

my $redis = RlockTest::Redis->start;
diag('server: ' . join(' ', $redis->cmd('INFO', 'server') =~
	  /^((?:redis|valkey)_version:\S+)/mg));
# a window long enough that psql's round trips between the lock and the
# COMMIT leave the worker fresh (the default is 1 ms)
my $node = RlockTest::node('marks', $redis,
	conf => ["rlock.verify_window = '1s'"]);
ok(RlockTest::wait_for_redis($node, 15), 'rlock is connected');
ok(armed($redis), 'tracking is on');

my $s = $node->background_psql('postgres', on_error_stop => 0);
my $t = $node->background_psql('postgres', on_error_stop => 0);

#---- a worker replaced ----

# The lock is tracked by the first worker under its first arming.  The
# worker exits (SIGTERM: the sessions keep their locks); the next one
# renews the lock it took over, on its own connection, and arms tracking
# with a number of its own, the first again.  It never read the key
# under tracking: Redis announces nothing of it, and the new worker knows
# nothing of it either.
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('tm:restart')");
my $mon = $redis->monitor;
my $old = RlockTest::worker_pid($node);
kill 'TERM', $old;
ok(RlockTest::wait_for_new_worker($node, $old, 30), 'a new worker runs');
ok(armed($redis), 'it arms tracking');
ok(monitor_until($mon, qr/"EVALSHA" "$renew_sha" .*"tm:restart"/, 15),
	'it renews the lock the session holds');
$redis->cmd('DEL', 'tm:restart');
# a mark comes back: the worker is fresh
$t->query_safe("SELECT rlock_session_try('tm:fresh')");
$t->query_safe("SELECT rlock_session_release('tm:fresh')");
commit_fails($s, 'tm:restart',
	'a lock tracked by the previous worker and deleted since fails the commit');

$s->quit;
$t->quit;
$node->stop;

done_testing();
