# Fair locks under pressure (a review of the fair kind):
#
# - a fair waiter behind a lock without expiry (a hash whose lease was
#   removed: PERSIST) looks at it again now and then, as a plain waiter
#   does, and does not try again every millisecond;
# - a string at the queue's key: the try fails with 58000 and the worker
#   goes on serving; a holder's release still frees the lock (as the
#   plain kind's, which reads the queue under pcall);
# - waiters that come and go leave no subscription behind, and the queue
#   and its deadlines stay in step;
# - a head that gives up while the lock is free lets the next waiter in at
#   once;
# - a grant whose reply may be lost (its connection killed behind a slow
#   grant) leaves the session and Redis agreeing;
# - a waiter cancelled while its first try is on the wire leaves no entry.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'the queue does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('fair_r', $redis,
	conf => [ "rlock.fair_wait_timeout = '10s'", 'log_min_messages = warning' ]);

sub queue { return $redis->cmd('LRANGE', "redisson_lock_queue:{$_[0]}", 0, -1) }
sub deadlines { return { @{ $redis->cmd('ZRANGE', "redisson_lock_timeout:{$_[0]}", 0, -1, 'WITHSCORES') } } }

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->{rlock_pid} = $s->query_safe('SELECT pg_backend_pid()');
	return $s;
}

sub evalsha_calls
{
	my ($line) = grep { /^cmdstat_evalsha:/ } split /\r?\n/,
	  $redis->cmd('INFO', 'commandstats');
	return $line && $line =~ /calls=(\d+)/ ? $1 : 0;
}

#---- a lock without expiry ----

{
	my $key = 'fp';
	$redis->cmd('HSET', $key, 'someone:1', 1);    # no PEXPIRE: no lease
	my $before = evalsha_calls();
	my $out = $node->safe_psql('postgres', "SELECT rlock_try_fair('$key', '2 s')");
	is($out, 'f', 'a waiter behind a lock without expiry does not get it');
	my $tries = evalsha_calls() - $before;
	cmp_ok($tries, '<', 50,
		"and it tried a few times in its 2 s, not every millisecond ($tries scripts)");
	is_deeply(queue($key), [], 'it left the queue');
	$redis->cmd('DEL', $key);
}

#---- a string at the queue's key ----

{
	my $key = 'fs';
	$redis->cmd('SET', "redisson_lock_queue:{$key}", 'not a list');
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT rlock_try_fair('$key', '1 s')");
	like($err, qr/58000/, 'a string at the queue key: the try fails with 58000');
	is($node->safe_psql('postgres', "SELECT rlock_try_fair('fs_other')"), 't',
		'and the worker goes on serving');
	$redis->cmd('DEL', "redisson_lock_queue:{$key}");
}

#---- waiters come and go ----

{
	my $key = 'fc';
	my $h = session();
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key', '0', '60 s')");
	my @w;
	for my $i (1 .. 6)
	{
		my $s = session();
		RlockTest::send_query($s, "SELECT rlock_try_fair('$key', '" . ($i % 2 ? 1 : 60) . " s');");
		ok(RlockTest::wait_until(sub { @{ queue($key) } == $i }, 10), "waiter $i queues");
		push @w, $s;
	}
	# the odd ones time out; cancel the even ones
	for my $i (2, 4, 6)
	{
		$node->safe_psql('postgres', "SELECT pg_cancel_backend($w[$i - 1]{rlock_pid})");
	}
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 0 }, 10), 'every one left the queue');
	is(scalar keys %{ deadlines($key) }, 0, 'with its deadline');
	ok(RlockTest::wait_until(sub {
		$node->safe_psql('postgres', 'SELECT subscribed_channels FROM rlock_status()') == 0 }, 10),
		'and no channel stays subscribed');
	is_deeply($redis->cmd('PUBSUB', 'CHANNELS', 'redisson_lock__channel*'), [],
		'Redis agrees');
	$h->query_safe('COMMIT');
	eval { $_->quit } for @w, $h;
}

#---- the head gives up while the lock is free ----

{
	my $key = 'fh';
	my $h = session();
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key', '0', '60 s')");
	my $a = session();
	RlockTest::send_query($a, "SELECT rlock_try_fair('$key', '60 s');");
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 1 }, 10), 'a head queues');
	my $b = session();
	RlockTest::send_query($b, "SELECT rlock_try_fair('$key', '60 s');");
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 2 }, 10), 'a second waiter behind it');
	# free the lock behind rlock's back (no message), then the head gives up
	$redis->cmd('DEL', $key);
	my $t0 = time;
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($a->{rlock_pid})");
	my ($out) = RlockTest::collect($b);
	is($out, 't', 'the waiter behind the head that gave up gets the lock');
	cmp_ok(time - $t0, '<', 5, 'at once, not at the head\'s deadline');
	eval { $_->quit } for $a, $b, $h;
}

#---- the grant's reply lost ----

{
	# a slow grant (its script lowers 100000 deadlines), whose connection
	# is killed behind it: the waiter is answered by the resync, and
	# whatever Redis says about the lock the session says too
	my $key = 'fl';
	my $h = session();
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key', '0', '60 s')");
	my $w = session();
	RlockTest::send_query($w, "BEGIN; SELECT rlock_try_fair('$key', '30 s');");
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 1 }, 10), 'a waiter queues');
	for my $i (0 .. 9)
	{
		$redis->cmd('ZADD', "redisson_lock_timeout:{$key}",
			map { (9999999999999, "junk$i:$_") } 1 .. 10000);
	}
	$h->query_safe('COMMIT');
	$redis->cmd('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
	my ($out) = RlockTest::collect($w);
	my $owner = $node->safe_psql('postgres',
		"SELECT owner FROM rlock_locks WHERE key = '$key' AND pid = $w->{rlock_pid}");
	my $held = $redis->cmd('HEXISTS', $key, $owner // '');
	note("answer $out, held in Redis $held, owner $owner");
	is($out, 't', 'the waiter gets the lock');
	is($held, 1, 'Redis says so too');
	is(scalar grep({ !/^junk/ } @{ queue($key) }), 0, 'and it is not queued any more');
	$w->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { !$redis->cmd('EXISTS', $key) }, 10), 'its commit frees it');
	$redis->cmd('DEL', "redisson_lock_timeout:{$key}");
	$_->quit for $w, $h;
}

#---- a string at the queue's key, put there while the lock is held ----

{
	my $key = 'fr';
	my $h = session();
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key')");
	$redis->cmd('SET', "redisson_lock_queue:{$key}", 'not a list');
	$h->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { !$redis->cmd('EXISTS', $key) }, 5),
		'a string at the queue key: the release still frees the lock');
	is($redis->cmd('GET', "redisson_lock_queue:{$key}"), 'not a list',
		'and leaves the string alone');
	$redis->cmd('DEL', "redisson_lock_queue:{$key}");
	$h->quit;
}

#---- cancelled while its first try is on the wire ----

{
	# Redis stopped while the first try is on its way; the backend is
	# cancelled meanwhile: the give-up, behind the try, takes the entry out
	my $key = 'fw';
	my $h = session();
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key', '0', '60 s')");
	my $w = session();
	$redis->freeze;
	RlockTest::send_query($w, "SELECT rlock_try_fair('$key', '60 s');");
	ok(RlockTest::wait_until(sub {
		$node->safe_psql('postgres',
			"SELECT count(*) FROM rlock_locks WHERE key = '$key' AND pid = $w->{rlock_pid}") == 1
	}, 10), 'its first try is on its way, Redis stopped');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($w->{rlock_pid})");
	$redis->thaw;
	ok(RlockTest::wait_until(sub { $redis->cmd('ZCARD', "redisson_lock_timeout:{$key}") == 0 }, 10),
		'the try on the wire is undone: no deadline left');
	is_deeply(queue($key), [], 'and no entry');
	$h->query_safe('COMMIT');
	eval { $_->quit } for $w, $h;
}

$node->stop;
done_testing();
