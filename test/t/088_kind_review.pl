# A review of the fair waiter's give-up kept for a connection that is
# down, of the re-subscription after a lost SUBSCRIBE, and of the message
# a release sends to a fair queue's first live owner, with hostile data
# and in a Redis Cluster:
#
# - a release of each kind (exclusive, shared) frees the lock whatever
#   sits at the keys of a fair queue beside it: a string, a hash, a
#   deadline key of another type, infinite deadlines, a queue of 100000
#   owners gone; the fair kind's own release with infinite deadlines and
#   a long stale queue too; and with a Redis user that may not run TIME
#   (an ACL from before the fair kind), a live fair waiter queued beside
#   the lock costs it its message, not the release its success;
# - replicas confirming (rlock.sync_replicas = 1): a fair waiter
#   cancelled while its first try is still on the wire (held back on the
#   sync connection) leaves nothing queued once the try runs: its give-up
#   went behind the try, on the same connection; one cancelled while
#   Redis is down leaves nothing once Redis is back (its give-up, kept
#   for the sync connection, goes out when that connection is ready),
#   and so does one cancelled while only the sync connection is lost;
# - rlock.sync_replicas = auto: a give-up kept for the sync connection
#   while the replica then leaves goes on the command connection, and the
#   session that waits again ends up queued behind the other waiter (here
#   the new command connection retries the waiter right after the
#   give-up, which hides the order the Cluster case below shows);
# - Cluster: a fair waiter cancelled while the worker's connection to its
#   key's primary is down keeps its give-up; the slot moves to another
#   primary, whose connection is ready, and the same session waits for
#   the same name again, on the entry still queued there; when the first
#   primary takes connections again, the kept give-up must not remove
#   the entry of that new wait: it goes out before the new wait's try, so
#   the session waiting again is queued behind the waiter that never
#   stopped, stays queued, and is let in by that waiter's release.  The
#   re-subscriptions of the waiters across that migration are counted
#   (SSUBSCRIBE on every primary, refused ones too): a handful, no loop.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Proxy;
use RlockTest::Redis;

plan skip_all => 'neither depends on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

sub derived
{
	my ($prefix, $key) = @_;
	return $key =~ /\{/ ? "$prefix:$key" : "$prefix:{$key}";
}

sub session { return RlockTest::session(@_) }

# SSUBSCRIBE calls on every primary of $cluster, those refused
# (redirected) too
sub ssubscribes
{
	my ($cluster) = @_;
	my $n = 0;
	for my $p ($cluster->primaries)
	{
		my ($calls, $rejected, $failed) = $p->cmd('INFO', 'commandstats')
		  =~ /^cmdstat_ssubscribe:calls=(\d+),.*rejected_calls=(\d+),failed_calls=(\d+)/m;
		$n += ($calls // 0) + ($rejected // 0) + ($failed // 0);
	}
	return $n;
}

sub waiting { return RlockTest::count_waiting($_[0]{rlock_node}, $_[0]{rlock_pid}) == 1 }

#---- hostile data beside a lock: the release still frees it ----

{
	my $redis = RlockTest::Redis->start;
	my $node = RlockTest::node('review_hostile', $redis);
	my $s = session($node);

	# what to write at the fair queue's keys of $key, by name
	my %hostile = (
		'a string queue' => sub {
			$redis->cmd('SET', derived('redisson_lock_queue', $_[0]), 'x');
		},
		'a hash queue' => sub {
			$redis->cmd('HSET', derived('redisson_lock_queue', $_[0]), 'a', 'b');
		},
		'a string deadline key' => sub {
			$redis->cmd('RPUSH', derived('redisson_lock_queue', $_[0]), 'o1', 'o2');
			$redis->cmd('SET', derived('redisson_lock_timeout', $_[0]), 'x');
		},
		'infinite deadlines' => sub {
			$redis->cmd('RPUSH', derived('redisson_lock_queue', $_[0]), 'o1', 'o2');
			$redis->cmd('ZADD', derived('redisson_lock_timeout', $_[0]),
				'-inf', 'o1', '+inf', 'o2');
		},
		'100000 owners gone' => sub {
			my $q = derived('redisson_lock_queue', $_[0]);
			my $d = derived('redisson_lock_timeout', $_[0]);
			for my $i (0 .. 99)
			{
				my @o = map { "gone$i:$_" } 0 .. 999;
				$redis->cmd('RPUSH', $q, @o);
				$redis->cmd('ZADD', $d, map { (1, $_) } @o);
			}
		});
	my %kinds = (
		exclusive => [ 'rlock_session_try', 'rlock_session_release',
			[ keys %hostile ] ],
		shared => [ 'rlock_session_try_shared', 'rlock_session_release_shared',
			[ keys %hostile ] ],
		# the fair kind's own scripts refuse another type at its keys
		fair => [ 'rlock_session_try_fair', 'rlock_session_release_fair',
			[ 'infinite deadlines', '100000 owners gone' ] ]);
	for my $kind (sort keys %kinds)
	{
		my ($try, $release, $cases) = @{ $kinds{$kind} };
		for my $case (sort @$cases)
		{
			(my $key = "hostile:$kind:$case") =~ s/ /_/g;
			is($s->query_safe("SELECT $try('$key')"), 't', "$kind, $case: taken");
			$hostile{$case}->($key);
			my $t0 = time;
			$s->query("SELECT $release('$key')");
			is($s->{stderr}, '', "$kind, $case: the release raises nothing");
			$s->{stderr} = '';
			ok(time - $t0 < 5, "$kind, $case: and takes no long");
			is($redis->cmd('EXISTS', $key), 0, "$kind, $case: the lock is freed");
			# a fair script drops 1000 gone heads a call, not all (queue.lua)
			is($redis->cmd('LLEN', derived('redisson_lock_queue', $key)), 99000,
				"$kind, $case: 1000 of the owners gone dropped, in bounded time")
			  if $kind eq 'fair' && $case eq '100000 owners gone';
			is($s->query_safe("SELECT rlock_held('$key')"), '0',
				"$kind, $case: and not counted");
		}
	}
	$s->quit;
	$node->stop;
}

#---- a Redis user that may not run TIME (an ACL from before fair locks) ----

{
	my $secret = 'review-secret';
	my $redis = RlockTest::Redis->start(
		args => [ '--user', 'notime', 'on', ">$secret", '~*', '&*', '+@all', '-time' ]);
	my $pw = RlockTest::password_file(PostgreSQL::Test::Utils::tempdir, $secret);
	my $node = RlockTest::node('review_notime', $redis,
		conf => [ "rlock.username = 'notime'", "rlock.password_file = '$pw'" ]);
	ok(RlockTest::wait_for_redis($node, 10), 'notime: rlock connects as a user without TIME');
	$redis->cmd('AUTH', 'notime', $secret);
	my $s = session($node);
	for my $kind ([ 'exclusive', '' ], [ 'shared', '_shared' ])
	{
		my ($what, $sfx) = @$kind;
		my $key = "notime:$what";
		is($s->query_safe("SELECT rlock_session_try$sfx('$key')"), 't', "notime, $what: taken");
		# a Java fair-lock waiter queued on the name, its deadline a minute on
		$redis->cmd('RPUSH', derived('redisson_lock_queue', $key), 'java:1');
		$redis->cmd('ZADD', derived('redisson_lock_timeout', $key), int(time * 1000) + 60000, 'java:1');
		$s->query("SELECT rlock_session_release$sfx('$key')");
		is($s->{stderr}, '', "notime, $what: the release raises nothing");
		$s->{stderr} = '';
		is($redis->cmd('EXISTS', $key), 0, "notime, $what: the lock is freed");
		is($s->query_safe("SELECT rlock_held$sfx('$key')"), '0', "notime, $what: and not counted");
	}
	$s->quit;
	$node->stop;
}

#---- replicas confirm: the give-up goes behind the try on the wire ----

{
	my $redis = RlockTest::Redis->start(
		args => [ '--appendonly', 'yes', '--appendfsync', 'always' ]);
	my $replica = $redis->start_replica;
	my $proxy = RlockTest::Proxy->start($redis->port);
	my $node = RlockTest::node('review_sync', $redis,
		command_timeout => '10s',
		conf => [ 'rlock.port = ' . $proxy->port, "rlock.sync_replicas = '1'" ]);
	ok( RlockTest::wait_until(
			sub {
				$node->safe_psql('postgres',
					'SELECT command_connection, sync_connection FROM rlock_status()')
				  eq 'ready|ready';
			},
			20),
		'sync: command and sync connections ready');
	my $key = 'sync:f';
	my $h = session($node);
	$h->query_safe("SELECT rlock_session_try_fair('$key')");

	# a waiter's first try, which queues it, is held on the way to Redis
	# when the waiter is cancelled
	is($proxy->hold('rlock_sync'), 1, 'sync: the sync connection is held back');
	my $w = session($node);
	RlockTest::send_query($w, "SELECT rlock_session_try_fair('$key', '1 min');");
	ok(RlockTest::wait_until(sub { $proxy->held_count('EVALSHA') >= 1 }, 10),
		'sync: the waiter\'s try is on the wire');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($w->{rlock_pid})");
	my (undef, $err) = RlockTest::collect($w);
	like($err, qr/ERROR:  57014/, 'sync: the waiter is cancelled');
	is($proxy->resume(10), 'resumed', 'sync: the try reaches Redis');
	ok( RlockTest::wait_until(
			sub {
				$redis->cmd('LLEN', derived('redisson_lock_queue', $key)) == 0
				  && $redis->cmd('ZCARD', derived('redisson_lock_timeout', $key)) == 0
			},
			5),
		'sync: its give-up ran behind it: nothing is queued')
	  or diag('queue: ' . join(' ', @{ $redis->cmd('LRANGE', derived('redisson_lock_queue', $key), 0, -1) }));
	is($h->query_safe("SELECT rlock_session_release_fair('$key')"), 't', 'sync: the holder releases');

	# a waiter cancelled while Redis is down: its give-up, kept for the
	# sync connection, goes out when that connection is ready again
	$key = 'sync:down';
	$h->query_safe("SELECT rlock_session_try_fair('$key', '0', '1 min')");
	my $w2 = session($node);
	RlockTest::send_query($w2, "SELECT rlock_session_try_fair('$key', '1 min');");
	ok( RlockTest::wait_until(
			sub { $redis->cmd('LLEN', derived('redisson_lock_queue', $key)) == 1 }, 10),
		'sync: a waiter is queued');
	$redis->stop;
	ok( RlockTest::wait_until(
			sub {
				$node->safe_psql('postgres',
					'SELECT command_connection, sync_connection FROM rlock_status()')
				  !~ /ready/;
			},
			10),
		'sync: Redis stopped, no connection is ready');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($w2->{rlock_pid})");
	(undef, $err) = RlockTest::collect($w2);
	like($err, qr/ERROR:  57014/, 'sync: the waiter is cancelled meanwhile');
	$redis->restart;
	ok( RlockTest::wait_until(
			sub {
				$redis->cmd('LLEN', derived('redisson_lock_queue', $key)) == 0
				  && $redis->cmd('ZCARD', derived('redisson_lock_timeout', $key)) == 0
			},
			10),
		'sync: Redis back, its give-up went out: nothing is queued');
	ok( RlockTest::wait_until(
			sub { ($h->query("SELECT rlock_session_release_fair('$key')") // '') eq 't' }, 10),
		'sync: the holder releases');

	# only the sync connection is lost, and cannot be made again for a
	# while: a waiter cancelled meanwhile keeps its give-up, which goes out
	# when the sync connection is ready (the command connection never
	# became ready again: it never went down)
	$key = 'sync:lost';
	ok( RlockTest::wait_until(
			sub { ($replica->cmd('INFO', 'replication') // '') =~ /master_link_status:up/ }, 20),
		'sync: the replica is attached again');
	$h->query_safe("SELECT rlock_session_try_fair('$key', '0', '1 min')");
	my $w3 = session($node);
	RlockTest::send_query($w3, "SELECT rlock_session_try_fair('$key', '1 min');");
	ok( RlockTest::wait_until(
			sub { $redis->cmd('LLEN', derived('redisson_lock_queue', $key)) == 1 }, 10),
		'sync: a waiter is queued');
	$redis->cmd('CONFIG', 'SET', 'maxclients', 1);
	$redis->cmd('CLIENT', 'KILL', 'ID', $redis->client_id('rlock_sync'));
	ok( RlockTest::wait_until(
			sub {
				$node->safe_psql('postgres',
					'SELECT command_connection, sync_connection FROM rlock_status()')
				  =~ /^ready\|(?!ready)/;
			},
			10),
		'sync: the sync connection is down, the command connection ready');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($w3->{rlock_pid})");
	(undef, $err) = RlockTest::collect($w3);
	like($err, qr/ERROR:  57014/, 'sync: the waiter is cancelled meanwhile');
	is($redis->cmd('LLEN', derived('redisson_lock_queue', $key)), 1,
		'sync: its give-up waits for the sync connection');
	$redis->cmd('CONFIG', 'SET', 'maxclients', 10000);
	ok( RlockTest::wait_until(
			sub {
				$redis->cmd('LLEN', derived('redisson_lock_queue', $key)) == 0
				  && $redis->cmd('ZCARD', derived('redisson_lock_timeout', $key)) == 0
			},
			10),
		'sync: the sync connection back, its give-up went out: nothing is queued');
	is($h->query_safe("SELECT rlock_session_release_fair('$key')"), 't',
		'sync: the holder releases');
	$_->quit for $h, $w, $w2, $w3;
	$node->stop;
	$proxy->stop;
}

#---- auto: a give-up kept for the sync connection, replicas then gone ----

{
	my $redis = RlockTest::Redis->start;
	my $replica = $redis->start_replica;
	my $node = RlockTest::node('review_auto', $redis);
	my $status = sub {
		$node->safe_psql('postgres',
			'SELECT command_connection, sync_connection FROM rlock_status()');
	};
	ok(RlockTest::wait_until(sub { $status->() eq 'ready|ready' }, 20),
		'auto: a replica, the sync connection ready');
	my $key = 'auto:f';
	my $queue = sub { join(' ', @{ $redis->cmd('LRANGE', derived('redisson_lock_queue', $key), 0, -1) }) };
	my $owner_of = sub {
		$node->safe_psql('postgres',
			"SELECT owner FROM rlock_locks WHERE key = '$key' AND pid = $_[0]{rlock_pid}");
	};
	my $h = session($node);
	$h->query_safe("SELECT rlock_session_try_fair('$key', '0', '2 min')");
	my ($w, $w3) = (session($node), session($node));
	for my $s ($w, $w3)
	{
		RlockTest::send_query($s, "SELECT rlock_session_try_fair('$key', '2 min');");
		ok(RlockTest::wait_until(sub { $owner_of->($s) ne '' && $queue->() =~ /\Q${\ $owner_of->($s)}\E$/ }, 10),
			'auto: a waiter is queued');
	}
	my ($o, $o3) = ($owner_of->($w), $owner_of->($w3));

	# the sync connection is lost and cannot be made: the first waiter's
	# cancel keeps its give-up for it
	$redis->cmd('CONFIG', 'SET', 'maxclients', 1);
	$redis->cmd('CLIENT', 'KILL', 'ID', $redis->client_id('rlock_sync'));
	ok(RlockTest::wait_until(sub { $status->() =~ /^ready\|(?!ready)/ }, 10),
		'auto: the sync connection is down');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($w->{rlock_pid})");
	my (undef, $err) = RlockTest::collect($w);
	like($err, qr/ERROR:  57014/, 'auto: the first waiter is cancelled');
	is($queue->(), "$o $o3", 'auto: its give-up waits for the sync connection');

	# the replica leaves: nothing is to be confirmed, tries go on the
	# command connection, and the same session waits again
	$replica->cmd('REPLICAOF', 'NO', 'ONE');
	ok(RlockTest::wait_until(sub { $status->() eq 'ready|unused' }, 30),
		'auto: the replica gone, the sync connection is unused');
	RlockTest::send_query($w, "SELECT rlock_session_try_fair('$key', '2 min');");
	ok(RlockTest::wait_until(sub { waiting($w) }, 10), 'auto: the first session waits again');

	# a new command connection is made (any reason will do)
	$redis->cmd('CONFIG', 'SET', 'maxclients', 10000);
	$redis->cmd('CLIENT', 'KILL', 'ID', $redis->client_id('rlock_command'));
	ok(RlockTest::wait_until(sub { $status->() eq 'ready|unused' }, 10),
		'auto: the command connection is made again');
	ok(RlockTest::wait_until(sub { waiting($w) && $queue->() eq "$o3 $o" }, 10),
		'auto: the session waiting again is queued behind the other');
	ok(!RlockTest::wait_until(sub { !waiting($w) || $queue->() ne "$o3 $o" }, 3),
		'auto: and stays queued while it waits')
	  or diag('queue now: ' . $queue->());
	$h->query_safe("SELECT rlock_session_release_fair('$key')");
	my ($out) = RlockTest::collect($w3);
	is($out, 't', 'auto: the holder releases, the waiter that did not stop gets the lock');
	my $t1 = time;
	$w3->query_safe("SELECT rlock_session_release_fair('$key')");
	($out) = RlockTest::collect($w);
	is($out, 't', 'auto: its release lets the other in');
	ok(time - $t1 < 10, sprintf('auto: at once, not at the end of its wait (%.1f s)', time - $t1));
	$w->query_safe("SELECT rlock_session_release_fair('$key')");
	$_->quit for $h, $w, $w3;
	$node->stop;
}

#---- Cluster: a kept give-up and a slot that moved ----

{
	my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 0,
		node_timeout_ms => 20000);
	my ($pa, $pb) = $cluster->primaries;
	my $seeds = join(',', map { '127.0.0.1:' . $_->rlock_port } $cluster->primaries);
	my $node = RlockTest::node('review_cluster', $pa,
		conf => [ "rlock.topology = 'cluster'", "rlock.nodes = '$seeds'",
			"rlock.watchdog_timeout = '3s'" ]);
	ok(RlockTest::wait_for_cluster_map($node, 3), 'the worker learnt the map');

	my ($tag) = grep { $cluster->owner($cluster->slot("{$_}"))->port == $pa->port }
	  map { "rv$_" } 0 .. 200;
	my ($btag) = grep { $cluster->owner($cluster->slot("{$_}"))->port == $pb->port }
	  map { "rv$_" } 0 .. 200;
	my $slot = $cluster->slot("{$tag}");
	my $key = "{$tag}:f";
	my $queue = sub { join(' ', @{ $_[0]->cmd('LRANGE', derived('redisson_lock_queue', $key), 0, -1) }) };
	my $owner_of = sub {
		$node->safe_psql('postgres',
			"SELECT owner FROM rlock_locks WHERE key = '$key' AND pid = $_[0]{rlock_pid}");
	};

	# the second primary's connection is in use all along: a session hold
	# there, renewed
	my $keep = session($node);
	$keep->query_safe("SELECT rlock_session_try('{$btag}:keep')");

	# a holder, then two waiters queued in order
	my $h = session($node);
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key', '0', '2 min')");
	my $w = session($node);
	RlockTest::send_query($w, "SELECT rlock_session_try_fair('$key', '2 min');");
	ok(RlockTest::wait_until(sub { $queue->($pa) ne '' }, 10), 'a first waiter is queued');
	my $w3 = session($node);
	RlockTest::send_query($w3, "SELECT rlock_session_try_fair('$key', '2 min');");
	ok(RlockTest::wait_until(sub { scalar(split ' ', $queue->($pa)) == 2 }, 10),
		'a second waiter is queued behind it');
	my ($o, $o3) = ($owner_of->($w), $owner_of->($w3));
	is($queue->($pa), "$o $o3", 'in order');

	# the first primary takes no new connection, and the worker's command
	# connection there is closed: the first waiter's cancel keeps its
	# give-up
	$pa->cmd('CONFIG', 'SET', 'maxclients', 1);
	my $id = $pa->client_id('rlock_command');
	$pa->cmd('CLIENT', 'KILL', 'ID', $id);
	ok(RlockTest::wait_until(sub { !defined $pa->client_id('rlock_command') }, 5),
		'the worker has no command connection to the first primary');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($w->{rlock_pid})");
	my (undef, $err) = RlockTest::collect($w);
	like($err, qr/ERROR:  57014/, 'the first waiter is cancelled');
	is($queue->($pa), "$o $o3", 'its give-up waits: its entry is still queued');

	# the slot moves to the second primary, and the same session waits for
	# the same name again: its entry, still queued there, is its own again
	my $ss0 = ssubscribes($cluster);
	my $t0 = time;
	$cluster->migrate_slot($slot, $pb);
	# (the kept give-up may go out at once now: with a try of the waiter
	# behind, retried when its subscription moved there)
	like($queue->($pb), qr/\Q$o3\E$/, 'the queue moved with the slot');
	RlockTest::send_query($w, "SELECT rlock_session_try_fair('$key', '2 min');");
	ok(RlockTest::wait_until(sub { waiting($w) }, 10), 'the first session waits again');
	is($owner_of->($w), $o, 'as the same owner');
	ok(RlockTest::wait_until(sub { waiting($w) && waiting($w3) }, 10),
		'both sessions wait');

	# the first primary takes connections again: the worker's command
	# connection there is made, and with it the kept give-up goes out
	$pa->cmd('CONFIG', 'SET', 'maxclients', 10000);
	ok(RlockTest::wait_until(sub { defined $pa->client_id('rlock_command') }, 15),
		'the worker connects to the first primary again');
	# the kept give-up runs before the new wait's try, never after it:
	# the session that waits is queued, behind the one that waited
	# without a break
	ok( RlockTest::wait_until(sub { waiting($w) && $queue->($pb) eq "$o3 $o" }, 10),
		'the session waiting again is queued behind the other');
	ok(!RlockTest::wait_until(sub { !waiting($w) || $queue->($pb) ne "$o3 $o" }, 3),
		'and stays queued while it waits')
	  or diag('queue now: ' . $queue->($pb));

	my $ss1 = ssubscribes($cluster);
	my $dt = time - $t0;
	ok($ss1 - $ss0 < 40,
		sprintf('a handful of SSUBSCRIBE across the migration (%d in %.1f s)', $ss1 - $ss0, $dt));

	# the holder's commit lets the queue's head in, its release the other
	$h->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { !waiting($w3) }, 10),
		'the holder committed, the head of the queue gets the lock');
	my ($out) = RlockTest::collect($w3);
	is($out, 't', 'the waiter that did not stop');
	ok(waiting($w), 'the other still waits');
	my $t1 = time;
	$w3->query_safe("SELECT rlock_session_release_fair('$key')");
	ok(RlockTest::wait_until(sub { !waiting($w) }, 20),
		'its release lets the other in');
	($out) = RlockTest::collect($w);
	is($out, 't', 'which gets the lock');
	ok(time - $t1 < 10, sprintf('at once, not at the end of its wait (%.1f s)', time - $t1));
	$w->query_safe("SELECT rlock_session_release_fair('$key')");
	is($queue->($pb), '', 'the queue is empty');
	$_->quit for $keep, $h, $w, $w3;
	$node->stop;
}

done_testing();
