# Shared and fair locks behind Sentinel and in a Redis Cluster, with the
# holds and waiters of two PostgreSQL instances across a change of
# primary:
#
# - Sentinel (rlock.sync_replicas = 1): two readers of both instances and
#   a writer waiting for them, a fair holder and two fair waiters queued
#   from both instances, and session holds of each kind, across a
#   SENTINEL FAILOVER (a third fair waiter, cancelled before, leaves the
#   queue: its give-up goes on the connection its try took, the one
#   replicas confirm).  On the new primary the read lock has both readers
#   and their timeout keys, the queue both waiters in order; the watchdog
#   renews there; the readers' commits let the writer in, the fair
#   holder's commit the first waiter and its commit the second;
# - Cluster (sharded pub/sub): the same holds and waiters on keys of one
#   primary while their slot migrates to another: the read lock, its
#   timeout keys and the queue move with the slot (one hash tag), the
#   waiters are woken on the new primary long before the 60 s leases end,
#   in queue order; session holds of each kind keep being renewed on the
#   new primary;
# - in both, after the change, an upgrade given back by a savepoint
#   leaves the read lock its reader's lease.
use strict;
use warnings;

use File::Temp ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Sentinel;

plan skip_all => 'Sentinel and Cluster over TLS: 037, 043 and 059 run those'
  if RlockTest::TLS::everywhere();

sub session { return RlockTest::session(@_) }

sub owner_of
{
	my ($s, $key) = @_;
	return $s->{rlock_node}->safe_psql('postgres',
		"SELECT owner FROM rlock_locks WHERE key = '$key' AND pid = $s->{rlock_pid}");
}

sub waiting
{
	my ($s) = @_;
	return RlockTest::count_waiting($s->{rlock_node}, $s->{rlock_pid}) == 1;
}

sub readers { return scalar grep { $_ ne 'mode' } @{ $_[0]->cmd('HKEYS', $_[1]) } }
# a name as Redisson derives the names of its other keys from it: braced
# unless it has braces of its own
sub tagged { return $_[0] =~ /\{/ ? $_[0] : "{$_[0]}" }
sub timeout_keys { return scalar @{ $_[0]->cmd('KEYS', tagged($_[1]) . ':*rwlock_timeout:1') } }
# clients subscribed to $channel on $r, sharded in a cluster
sub subscribers
{
	my ($r, $channel, $what) = @_;
	my $n = $r->cmd('PUBSUB', $what eq 'cluster' ? 'SHARDNUMSUB' : 'NUMSUB', $channel);
	return ref $n eq 'ARRAY' ? $n->[1] : -1;
}

sub queue
{
	my ($r, $key) = @_;
	return join(' ', @{ $r->cmd('LRANGE', 'redisson_lock_queue:' . tagged($key), 0, -1) });
}

# The holds and waiters of both rounds, on Redis $r (what $where() says
# is the primary of the keys now), before the change $change->() makes.
sub round
{
	my ($what, $na, $nb, $rk, $fk, $sk, $where, $change) = @_;
	my $r = $where->();

	# two readers, one per instance, and a writer waiting for them
	my $ra = session($na);
	$ra->query_safe("BEGIN; SELECT rlock_try_shared('$rk', '0', '60 s')");
	my $rb = session($nb);
	$rb->query_safe("BEGIN; SELECT rlock_try_shared('$rk', '0', '60 s')");
	my $w = session($nb);
	RlockTest::send_query($w, "BEGIN; SELECT rlock_try('$rk', '60 s');");
	ok(RlockTest::wait_until(sub { waiting($w) }, 10), "$what: a writer waits for two readers");

	# a fair holder and two waiters, one per instance
	my $f = session($na);
	$f->query_safe("BEGIN; SELECT rlock_try_fair('$fk', '0', '60 s')");
	my @q = (session($nb), session($na));
	for my $i (0, 1)
	{
		RlockTest::send_query($q[$i], "BEGIN; SELECT rlock_try_fair('$fk', '60 s');");
		ok(RlockTest::wait_until(sub { scalar(split ' ', queue($r, $fk)) == $i + 1 }, 10),
			"$what: fair waiter " . ($i + 1) . ' is queued');
	}
	my $order = join(' ', map { owner_of($_, $fk) } @q);
	is(queue($r, $fk), $order, "$what: in order");

	# a third one, cancelled, leaves the queue (its give-up goes where its
	# try went: with Sentinel here, on the connection replicas confirm)
	my $c = session($nb);
	RlockTest::send_query($c, "SELECT rlock_try_fair('$fk', '60 s');");
	ok(RlockTest::wait_until(sub { scalar(split ' ', queue($r, $fk)) == 3 }, 10),
		"$what: a third fair waiter is queued");
	$nb->safe_psql('postgres', "SELECT pg_cancel_backend($c->{rlock_pid})");
	my (undef, $cerr) = RlockTest::collect($c);
	like($cerr, qr/ERROR:  57014/, "$what: it is cancelled");
	ok(RlockTest::wait_until(sub { queue($r, $fk) eq $order }, 5),
		"$what: and leaves the queue at once");
	$c->quit;

	# session holds of each kind, renewed by the watchdog
	my $s = session($na);
	$s->query_safe("SELECT rlock_session_try_shared('$sk:r'), rlock_session_try_fair('$sk:f')");

	my $t0 = time;
	my $new = $change->();
	diag(sprintf('%s: the change took %.1f s', $what, time - $t0));
	$r = $where->();
	is($r->port, $new->port, "$what: the keys are on the new primary");
	is($r->cmd('HGET', $rk, 'mode'), 'read', "$what: a read lock there");
	is(readers($r, $rk), 2, "$what: with both readers");
	is(timeout_keys($r, $rk), 2, "$what: and their timeout keys");
	is(queue($r, $fk), $order, "$what: the queue there has both waiters in order");
	ok(RlockTest::wait_for_renewal($r, "$sk:r", 10) && RlockTest::wait_for_renewal($r, "$sk:f", 10),
		"$what: the watchdog renews the session holds there");
	is(timeout_keys($r, "$sk:r"), 1, "$what: the session reader's timeout key too");

	# the waiters listen on the new primary: the writer on the lock's
	# channel, each fair waiter on its own
	my @channels = ('redisson_lock__channel:' . tagged($rk),
		map { 'redisson_lock__channel:' . tagged($fk) . ':' . $_ } split ' ', $order);
	ok( RlockTest::wait_until(
			sub { !grep { subscribers($r, $_, $what) != 1 } @channels }, 15),
		"$what: the waiters are subscribed on the new primary");

	# the last reader of the writer's instance first: the other's release
	# then wakes the writer through the new primary
	$rb->query_safe('COMMIT');
	ok(waiting($w), "$what: the writer waits for the second reader");
	my @took;
	my $t1 = time;
	$ra->query_safe('COMMIT');
	my ($out, $err) = RlockTest::collect($w);
	push @took, time - $t1;
	is($out, 't', "$what: and gets the lock once both readers commit");
	is($r->cmd('HGET', $rk, 'mode'), 'write', "$what: a write lock now");
	$w->query_safe('COMMIT');

	# an upgrade given back by a savepoint: the read lock left has the
	# reader's 2 s lease, not the exclusive hold's (release.lua reads the
	# reader's timeout key beside the lock)
	$w->query_safe("BEGIN; SELECT rlock_try_shared('$rk', '0', '2 s')");
	$w->query_safe("SAVEPOINT u; SELECT rlock_try('$rk')");
	is($r->cmd('HGET', $rk, 'mode'), 'write', "$what: a reader upgrades");
	$w->query_safe('ROLLBACK TO SAVEPOINT u');
	cmp_ok($r->cmd('PTTL', $rk), '<=', 2000,
		"$what: given back, the read lock keeps the reader's lease");
	$w->query_safe('COMMIT');
	is($r->cmd('EXISTS', $rk), 0, "$what: and ends at the commit");

	$t1 = time;
	$f->query_safe('COMMIT');
	($out) = RlockTest::collect($q[0]);
	push @took, time - $t1;
	is($out, 't', "$what: the fair holder's commit lets the first waiter in");
	ok(waiting($q[1]), "$what: the second still waits");
	$t1 = time;
	$q[0]->query_safe('COMMIT');
	($out) = RlockTest::collect($q[1]);
	push @took, time - $t1;
	is($out, 't', "$what: and gets the lock at the first one's commit");
	$q[1]->query_safe('COMMIT');
	ok(!grep({ $_ > 10 } @took),
		"$what: each woken long before the 60 s leases end ("
		  . join(', ', map { sprintf('%.2f s', $_) } @took) . ')');

	is($s->query_safe("SELECT rlock_held_shared('$sk:r') || ' ' || rlock_held_fair('$sk:f')"),
		'1 1', "$what: the session holds are still counted");
	$s->query_safe("SELECT rlock_session_release_shared('$sk:r'), rlock_session_release_fair('$sk:f')");
	ok( RlockTest::wait_until(
			sub { !grep { !/^rlock_instance:/ } @{ $r->cmd('KEYS', '*') } }, 5),
		"$what: nothing is left on the new primary");
	$_->quit for $ra, $rb, $w, $f, @q, $s;
}

#---- Sentinel ----

{
	my ($dep, $na, $nb) = RlockTest::sentinel_nodes('kt_sa', 'kt_sb');
	round('sentinel', $na, $nb, 'st:r', 'st:f', 'st:s',
		sub { $dep->primary },
		sub {
			my $new = $dep->failover(timeout => 30);
			for my $n ($na, $nb)
			{
				RlockTest::wait_until(
					sub {
						$n->safe_psql('postgres',
							'SELECT redis_address, command_connection FROM rlock_status()')
						  eq '127.0.0.1:' . $new->rlock_port . '|ready';
					},
					15)
				  or die $n->name . ' did not follow the failover';
			}
			return $new;
		});
	$_->stop for $na, $nb;
}

#---- Cluster ----

{
	my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1,
		node_timeout_ms => 20000);
	my @primaries = $cluster->primaries;
	my ($na, $nb) = RlockTest::cluster_nodes($cluster, 'kt_ca', 'kt_cb');
	is($na->safe_psql('postgres', 'SELECT cluster_pubsub FROM rlock_status()'), 'sharded',
		'sharded pub/sub');

	# one hash tag for all keys: one slot, of the first primary
	my ($tag) = grep { $cluster->owner($cluster->slot("{$_}"))->port == $primaries[0]->port }
	  map { "kt$_" } 0 .. 200;
	my $slot = $cluster->slot("{$tag}");
	round('cluster', $na, $nb, "{$tag}:r", "{$tag}:f", "{$tag}:s",
		sub { $cluster->owner($slot) },
		sub {
			$cluster->migrate_slot($slot, $primaries[1]);
			return $primaries[1];
		});
}

done_testing();
