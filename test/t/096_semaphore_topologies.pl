# Semaphores behind Sentinel and in a Redis Cluster, with the holds and
# waiters of two PostgreSQL instances across a change of primary, as 087
# does for the shared and fair kinds:
#
# - Sentinel (rlock.sync_replicas = 1): a transaction holding two permits
#   and a session holding one (leases of 60 s: only messages wake the
#   waiters), a waiter for two and one for one on the other instances,
#   and a session hold renewed by the watchdog, across a SENTINEL
#   FAILOVER.  On the new primary the same members are there and the
#   count is exact; the waiters are subscribed there (one subscription
#   per instance); the watchdog renews there; the commit and the release
#   wake the waiters long before the leases end; all permits come back;
# - Cluster (sharded pub/sub): the same on a semaphore whose slot
#   migrates to another primary while its permits are held and waited
#   for (the name, its members and its channel share a slot), and beside
#   it semaphores without braces on every primary, each held on one
#   instance and waited for on the other: each waiter is woken on its
#   own shard by the release, and every count is exact after.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Sentinel;

plan skip_all => 'Sentinel and Cluster over TLS: 037, 043 and 059 run those'
  if RlockTest::TLS::everywhere();

sub session { return RlockTest::session(@_) }
sub waiting { return RlockTest::count_waiting($_[0]{rlock_node}, $_[0]{rlock_pid}) == 1 }

# a name as Redisson derives the names of its other keys from it
sub tagged { return $_[0] =~ /\{/ ? $_[0] : "{$_[0]}" }
sub timeout_key { return tagged($_[0]) . ':timeout' }
sub members { return { @{ $_[0]->cmd('ZRANGE', timeout_key($_[1]), 0, -1, 'WITHSCORES') } } }
sub available { return $_[0]->cmd('GET', $_[1]) // 0 }

# available + taken on Redis $r, read at one instant (one script); more
# than $n anywhere is remembered
my @twice;
my $total_lua = "return tonumber(redis.call('get', KEYS[1]) or '0') + redis.call('zcard', KEYS[2])";

sub total
{
	my ($r, $name, $n) = @_;
	my $sum = $r->cmd('EVAL', $total_lua, 2, $name, timeout_key($name));
	push @twice, "$name: $sum of $n" if $sum > $n;
	return $sum;
}

sub redis_ms
{
	my ($s, $us) = @{ $_[0]->cmd('TIME') };
	return $s * 1000 + int($us / 1000);
}

# clients subscribed to semaphore $name's channel on $r, sharded in a cluster
sub subscribers
{
	my ($r, $name, $what) = @_;
	my $n = $r->cmd('PUBSUB', $what eq 'cluster' ? 'SHARDNUMSUB' : 'NUMSUB',
		'redisson_sc:' . tagged($name));
	return ref $n eq 'ARRAY' ? $n->[1] : -1;
}

# Permits of $name (3, leases of 60 s) and $sname (1, the watchdog's) held
# and waited for by sessions of $na and $nb on Redis $r (what $where()
# says is the primary of both now), before the change $change->() makes.
sub round
{
	my ($what, $na, $nb, $name, $sname, $where, $change) = @_;
	my $r = $where->();
	is($na->safe_psql('postgres', "SELECT rlock_set_permits('$name', 3), rlock_set_permits('$sname', 1)"),
		't|t', "$what: permits set");
	my $t = session($na);
	$t->query_safe("BEGIN; SELECT rlock_try_permits('$name', 2, '0', '60 s')");
	my $h = session($nb);
	$h->query_safe("SELECT rlock_session_try_permits('$name', 1, '0', '60 s')");
	my $w1 = session($nb);
	RlockTest::send_query($w1, "BEGIN; SELECT rlock_try_permits('$name', 2, '60 s');");
	my $w2 = session($na);
	RlockTest::send_query($w2, "SELECT rlock_session_try_permits('$name', 1, '60 s');");
	ok(RlockTest::wait_until(sub { waiting($w1) && waiting($w2) }, 10),
		"$what: a waiter for two and one for one wait, one per instance");
	my $s = session($na);
	$s->query_safe("SELECT rlock_session_try_permits('$sname')");
	my %before = %{ members($r, $name) };
	is(scalar keys %before, 3, "$what: three members");
	is(total($r, $name, 3) . ' ' . total($r, $sname, 1), '3 1', "$what: the counts are exact");

	my $t0 = time;
	my $new = $change->();
	diag(sprintf('%s: the change took %.1f s', $what, time - $t0));
	$r = $where->();
	is($r->port, $new->port, "$what: the semaphores are on the new primary");
	is_deeply([ sort keys %{ members($r, $name) } ], [ sort keys %before],
		"$what: with the same members");
	is(total($r, $name, 3) . ' ' . available($r, $name), '3 0',
		"$what: the count is exact, none available");
	ok(waiting($w1) && waiting($w2), "$what: the waiters still wait");
	ok(RlockTest::wait_until(sub { subscribers($r, $name, $what) == 2 }, 15),
		"$what: subscribed on the new primary, one subscription per instance");
	my $since = redis_ms($r);
	ok( RlockTest::wait_until(
			sub {
				my @ends = values %{ members($r, $sname) };
				@ends == 1 && $ends[0] > $since + 3000;
			},
			10),
		"$what: the watchdog renews the session hold there");
	is(total($r, $sname, 1), 1, "$what: its count exact");

	my @took;
	my $t1 = time;
	is($t->query('COMMIT'), '', "$what: the transaction holder commits");
	is($t->{stderr}, '', "$what: without an error");
	ok(RlockTest::wait_until(sub { total($r, $name, 3); !waiting($w1) || !waiting($w2) }, 10),
		"$what: and a waiter gets the permits it gave back");
	push @took, time - $t1;
	$t1 = time;
	is($h->query_safe("SELECT rlock_session_release_permits('$name')"), 't',
		"$what: the session holder releases its permit");
	my ($out1) = RlockTest::collect($w1);
	my ($out2) = RlockTest::collect($w2);
	push @took, time - $t1;
	is("$out1 $out2", 't t', "$what: and the other waiter gets what it waits for");
	ok(!grep({ $_ > 10 } @took),
		"$what: each woken long before the 60 s leases end ("
		  . join(', ', map { sprintf('%.2f s', $_) } @took) . ')');
	is(total($r, $name, 3) . ' ' . available($r, $name), '3 0',
		"$what: exact, the waiters holding all three");

	$w1->query_safe('COMMIT');
	$w2->query_safe("SELECT rlock_session_release_permits('$name')");
	is($s->query_safe("SELECT rlock_held_permits('$sname')"), '1',
		"$what: the session hold is still counted");
	$s->query_safe("SELECT rlock_session_release_permits('$sname')");
	ok( RlockTest::wait_until(
			sub {
				available($r, $name) == 3 && total($r, $name, 3) == 3
				  && available($r, $sname) == 1 && total($r, $sname, 1) == 1;
			},
			5),
		"$what: all permits back on the new primary");
	$_->quit for $t, $h, $w1, $w2, $s;
}

#---- Sentinel ----

{
	my ($dep, $na, $nb) = RlockTest::sentinel_nodes('st_sa', 'st_sb');
	round('sentinel', $na, $nb, 'ss:a', 'ss:s',
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
			# a grant counts once a replica confirms it: with none synced
			# yet it is undone and fails with 58030 (rlock.sync_replicas)
			RlockTest::wait_until(
				sub { ($new->cmd('INFO', 'replication') // '') =~ /^slave\d+:.*state=online/m },
				30)
			  or die 'no replica of the new primary is online';
			return $new;
		});
	$_->stop for $na, $nb;
}

#---- Cluster ----

{
	my $cluster = RlockTest::Cluster->start(primaries => 3, replicas => 1,
		node_timeout_ms => 20000);
	my @primaries = $cluster->primaries;
	my ($na, $nb) = RlockTest::cluster_nodes($cluster, 'st_ca', 'st_cb');
	is($na->safe_psql('postgres', 'SELECT cluster_pubsub FROM rlock_status()'), 'sharded',
		'sharded pub/sub');

	# semaphores without braces, two on each primary: one permit each,
	# held on one instance (a lease of 60 s) and waited for on the other
	my @names;
	for my $p (@primaries)
	{
		push @names, (grep { $cluster->owner($cluster->slot($_))->port == $p->port }
			  map { "cs:$_" } 0 .. 200)[ 0, 1 ];
	}
	my $on = sub { $cluster->owner($cluster->slot($_[0])) };
	my (@holders, @waiters);
	for my $i (0 .. $#names)
	{
		my ($hn, $wn) = $i % 2 ? ($nb, $na) : ($na, $nb);
		my $name = $names[$i];
		$hn->safe_psql('postgres', "SELECT rlock_set_permits('$name', 1)");
		my $h = session($hn);
		$h->query_safe("SELECT rlock_session_try_permits('$name', 1, '0', '60 s')");
		my $w = session($wn);
		RlockTest::send_query($w, "SELECT rlock_session_try_permits('$name', 1, '60 s');");
		push @holders, $h;
		push @waiters, $w;
	}
	ok(RlockTest::wait_until(sub { !grep { !waiting($_) } @waiters }, 10),
		scalar(@names) . ' semaphores on three primaries each have a waiter');
	is(join(' ', map { total($on->($_), $_, 1) . available($on->($_), $_) } @names),
		join(' ', ('10') x @names), 'each one taken, none available');

	# one hash tag for the semaphore that moves: a slot of the first primary
	my ($tag) = grep { $cluster->owner($cluster->slot("{$_}"))->port == $primaries[0]->port }
	  map { "st$_" } 0 .. 200;
	my $slot = $cluster->slot("{$tag}");
	round('cluster', $na, $nb, "{$tag}:m", "{$tag}:s",
		sub { $cluster->owner($slot) },
		sub {
			$cluster->migrate_slot($slot, $primaries[1]);
			return $primaries[1];
		});

	is(join(' ', map { subscribers($on->($_), $_, 'cluster') } @names),
		join(' ', ('1') x @names), 'each waiter subscribed on its own shard');
	my $t0 = time;
	for my $i (0 .. $#names)
	{
		is($holders[$i]->query_safe("SELECT rlock_session_release_permits('$names[$i]')"),
			't', "$names[$i]: released");
	}
	my @got = map { (RlockTest::collect($_))[0] } @waiters;
	my $took = time - $t0;
	is(join(' ', @got), join(' ', ('t') x @names), 'every waiter gets its permit');
	cmp_ok($took, '<', 10, "long before the 60 s leases end ($took s)");
	for my $i (0 .. $#names)
	{
		$waiters[$i]->query_safe("SELECT rlock_session_release_permits('$names[$i]')");
	}
	ok( RlockTest::wait_until(
			sub { !grep { available($on->($_), $_) != 1 || total($on->($_), $_, 1) != 1 } @names },
			5),
		'all back, exact on every primary');
	$_->quit for @holders, @waiters;
}

is(join('; ', @twice), '', 'no look at a semaphore found a permit counted twice');

done_testing();
