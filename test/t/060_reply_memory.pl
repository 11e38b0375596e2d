# Memory that lying servers can make the worker hold, across many
# connections, and replies that stop half-way.
#
# A Redis Cluster of one real node behind a relay that lies
# (RlockTest::Hostile) listening on 30 ports: the slot map, as the relay
# tells it, names 30 primaries, one per port, so the worker has a command
# connection to each, all going through the relay to the one node.
#
# - Every command connection is sent half an array, with no command
#   waiting, and rlock.command_timeout lowered from 30 s to 1 s: the
#   replies still incomplete are dropped with that reason, in the log too;
# - every command connection is sent, with no command waiting, an array
#   of 8 elements of which 7 come (bulk strings of 1,000,000 bytes): each
#   stays below its connection's own limits (8 MiB per reply, 2 MiB
#   buffered), 210 MB in all.  The worker grows by less than 64 MB (the
#   budget of all readers is 32 MiB), keeps its pid, the postmaster is
#   not restarted, connections are dropped with the budget named in
#   rlock_status() and the log (once);
# - the same budget with the readers alone (test/unit/reply_budget.c):
#   the reader holding the most is dropped, the one growing or another,
#   it gives its memory back at once, and a reader of small honest
#   replies is never dropped;
# - the relay honest again: a lock on every primary works;
# - a push that stops half-way on the subscriber connection of a waiter
#   (no command waits there): the connection is dropped within
#   rlock.command_timeout and a margin, and the waiter is still served.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Hostile;

plan skip_all => 'the relay reads the plain protocol: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $primaries = 30;
my $budget_mb = 32;
my $bound_mb = 64;

my ($redis, $hostile) = RlockTest::Hostile->cluster_of_one(ports => $primaries);
my @ports = $hostile->ports;

# RESP of a Perl value: array refs are arrays, \N integers, strings bulk
sub resp { return RlockTest::Resp::encode(@_) }

# the slots in $primaries ranges, the relay's ports their primaries
my @ranges = map {
	[ int($_ * 16384 / $primaries), int(($_ + 1) * 16384 / $primaries) - 1 ]
} 0 .. $primaries - 1;
my $shards = resp([ map {
	my $i = $_;
	[ 'slots', [ \$ranges[$i][0], \$ranges[$i][1] ],
	  'nodes', [ [ 'id', sprintf('%040x', $i + 1), 'port', \$ports[$i],
		  'ip', '127.0.0.1', 'endpoint', '127.0.0.1', 'role', 'master',
		  'replication-offset', \0, 'health', 'online' ] ] ]
} 0 .. $primaries - 1 ]);

# a key of each primary's slots
my @keys;
for (my $j = 0; grep({ !defined } @keys[ 0 .. $primaries - 1 ]); $j++)
{
	my $slot = $redis->cmd('CLUSTER', 'KEYSLOT', "m:$j");
	my ($i) = grep { $ranges[$_][0] <= $slot && $slot <= $ranges[$_][1] } 0 .. $#ranges;
	$keys[$i] //= "m:$j";
}
my $key_list = join(', ', map { "'$_'" } @keys);

sub status
{
	my ($node, $cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM rlock_status()");
}

# rlock.command_timeout, read by the worker before the next request
sub set_command_timeout
{
	my ($node, $timeout) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET rlock.command_timeout = '$timeout'; SELECT pg_reload_conf()");
	RlockTest::wait_until(
		sub { $node->safe_psql('postgres', 'SHOW rlock.command_timeout') eq $timeout },
		10) or die "rlock.command_timeout did not become $timeout";
}

# a field of /proc/<pid>/status, in kB
sub proc_status
{
	my ($pid, $field) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return 0;
	while (<$fh>)
	{
		return $1 if /^\Q$field\E:\s+(\d+)/;
	}
	return 0;
}

# Bytes sent by the relay that the worker has not read yet: the queues of
# both ends of its connections (loopback, IPv4)
my %relay_port = map { $_ => 1 } @ports;
sub unread_by_worker
{
	open(my $fh, '<', '/proc/net/tcp') or die "/proc/net/tcp: $!";
	my $bytes = 0;
	while (<$fh>)
	{
		my @f = split ' ';
		next unless @f > 4 && $f[1] =~ /:([0-9A-F]{4})$/;
		my $local = hex($1);
		my ($remote) = $f[2] =~ /:([0-9A-F]{4})$/;
		my ($tx, $rx) = map { hex } split /:/, $f[4];
		$bytes += $tx if $relay_port{$local};
		$bytes += $rx if $relay_port{ hex($remote) };
	}
	return $bytes;
}

$hostile->replace('rlock_cluster', qr/^CLUSTER SHARDS/, $shards);
my $node = RlockTest::node('mem', $redis,
	connect_timeout => '2s',
	command_timeout => '30s',
	conf => [ "rlock.topology = 'cluster'", "rlock.nodes = '127.0.0.1:$ports[0]'",
		# no ROLE now and then on the command connections: a reply to
		# it would complete the lies below
		"rlock.sync_replicas = off" ]);
my $worker = RlockTest::worker_pid($node);
my $postmaster_start = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

ok(RlockTest::wait_until(sub { status($node, 'cluster_primaries') == $primaries }, 20),
	"the map names $primaries primaries, all the relay");
is($node->safe_psql('postgres', "BEGIN; SELECT bool_and(rlock_try(k)) FROM unnest(ARRAY[$key_list]) k; COMMIT"),
	't', 'a lock is taken on each primary');
ok(RlockTest::wait_until(sub { $hostile->connections('rlock_command') >= $primaries }, 10),
	'each primary has a command connection through the relay');

#---- replies left incomplete, no command waiting ----

# Half an array (the first of two elements) on every command connection,
# made a moment ago and never dropped: each clock starts at 30 s and
# runs out at 1 s when lowered
my $made = $hostile->connections('rlock_command');
$hostile->inject_bulks('rlock_command', "*2\r\n", 1, 10);
ok( RlockTest::wait_until(
		sub { $hostile->unsent == 0 && unread_by_worker() == 0 }, 10),
	'the worker read half a reply on each command connection');
set_command_timeout($node, '1s');
ok( RlockTest::wait_until(
		sub { status($node, 'last_error') =~ /a reply left incomplete for longer than rlock\.command_timeout \(1000 ms\)/ },
		10),
	'rlock.command_timeout at 1 s: the replies still incomplete are dropped, saying why');
like(slurp_file($node->logfile),
	qr/rlock lost its command connection to Redis at 127\.0\.0\.1:\d+: a reply left incomplete/,
	'and the log says so');
set_command_timeout($node, '30s');
ok(RlockTest::wait_until(sub { $hostile->connections('rlock_command') >= $made + $primaries }, 10),
	'each primary has its command connection made again');
is($node->safe_psql('postgres', "BEGIN; SELECT bool_and(rlock_try(k)) FROM unnest(ARRAY[$key_list]) k; COMMIT"),
	't', 'a lock is taken on each primary again');

#---- many connections, each below its own limits ----

my $rss_before = proc_status($worker, 'VmRSS');
my $reconnects_before = $hostile->connections('rlock_command');
$hostile->inject_bulks('rlock_command', "*8\r\n", 7, 1_000_000);
my $t0 = time;
# rlock_status() shows the latest error only, and a command on a
# connection that was not dropped completes its lie (an array one short)
# and becomes the latest: the budget's is looked for while the lies are
# read, and once more after
my $budget_error = qr/a reply rlock does not accept: the replies of all connections would hold more than $budget_mb MiB of memory, and this connection held the most \(\d+ bytes\)/;
my $status_named_budget = 0;
ok( RlockTest::wait_until(
		sub {
			$status_named_budget ||= status($node, 'last_error') =~ $budget_error;
			$hostile->unsent == 0 && unread_by_worker() == 0;
		},
		60),
	sprintf('the worker read everything the relay sent (%.1f s)', time - $t0));
$status_named_budget ||= status($node, 'last_error') =~ $budget_error;
ok($status_named_budget, 'rlock_status() names the budget');
my $hwm = proc_status($worker, 'VmHWM');
my $growth = $hwm - $rss_before;
note("worker RSS $rss_before kB before, peak $hwm kB; "
	  . ($hostile->connections('rlock_command') - $reconnects_before)
	  . ' command connections made again');
cmp_ok($growth, '<', $bound_mb * 1024,
	"$primaries connections sent 7 MB each: the worker grew by $growth kB, under $bound_mb MB");
is(RlockTest::worker_pid($node), $worker, 'the worker is the same process');
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $postmaster_start,
	'the postmaster did not restart');
# a dropped connection is made again in the background, not at once
ok(RlockTest::wait_until(
		sub { $hostile->connections('rlock_command') - $reconnects_before >= $primaries / 2 }, 10),
	'connections holding the most were dropped, and made again');
my @logged = slurp_file($node->logfile) =~ /(rlock dropped its command connection to Redis at [^\n]*more than $budget_mb MiB)/g;
is(scalar(@logged), 1, 'the budget is logged once');

#---- which reader the budget drops (test/unit/reply_budget.c) ----

# Six readers fed 7 MB lies, three one after the other and three in
# turns, and an honest reader taking a small reply after each piece
my %budget = map { /^(\w+) (.*)$/ ? ($1 => $2) : () }
  split /\n/, `${\ RlockTest::unit_program('reply_budget')}`;
is($?, 0, 'the readers ran clean under AddressSanitizer');
cmp_ok($budget{max_held}, '<=', $budget_mb * 1024 * 1024,
	"all readers together never held more than $budget_mb MiB ($budget{max_held} bytes)");
cmp_ok($budget{dropped_by_other}, '>=', 1,
	'a reader holding more than the one growing is dropped for it');
cmp_ok($budget{dropped_growing}, '>=', 1,
	'a growing reader that holds the most is dropped itself');
is($budget{held_after_drop}, 0, 'a dropped reader gives back all it held at once');
is($budget{other_faults}, 0, 'no reader fails for another limit');
is("$budget{honest_fault} $budget{honest_replies}", "0 $budget{turns}",
	"the honest reader took its $budget{turns} small replies and was never dropped");
like($budget{fault}, qr/more than $budget_mb MiB of memory, and this connection held the most/,
	'the fault names the budget');

# rlock.command_timeout at 1 s from here on (the push below)
set_command_timeout($node, '1s');

#---- the relay honest again ----

# only the command connections' faults: clearing every rule would let a
# map read in between give the servers' own addresses, and the waiter
# below would then subscribe past the relay
$hostile->clear('rlock_command');
ok( RlockTest::wait_until(
		sub {
			my ($rc, $out) = $node->psql('postgres',
				"BEGIN; SELECT bool_and(rlock_try(k)) FROM unnest(ARRAY[$key_list]) k; COMMIT");
			return $rc == 0 && $out eq 't';
		},
		20),
	'the relay honest again: a lock is taken on every primary');

#---- a push that stops half-way on an idle subscriber connection ----

my $key = $keys[0];
my $holder = $node->background_psql('postgres', on_error_stop => 0);
$holder->query_safe("BEGIN; SELECT rlock_try('$key')");
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($waiter, "BEGIN; SELECT rlock_try('$key', '60 s'); COMMIT;");
ok(RlockTest::waiting_in_sql($node, $key), 'a waiter waits on the subscriber connection');
ok(RlockTest::wait_until(sub { $hostile->connections('rlock_subscriber') > 0 }, 10),
	'its subscriber connection goes through the relay');
# subscribed (sharded or classic): Redis has confirmed it, no command
# waits on that connection
my $channel = "redisson_lock__channel:{$key}";
ok( RlockTest::wait_until(
		sub {
			$redis->cmd('PUBSUB', 'SHARDNUMSUB', $channel)->[1]
			  + $redis->cmd('PUBSUB', 'NUMSUB', $channel)->[1] == 1;
		},
		10),
	'the waiter is subscribed');
my $subscribers = $hostile->connections('rlock_subscriber');
$hostile->inject('rlock_subscriber', "*3\r\n\$7\r\nmessage\r\n\$9\r\nredisson_");
$t0 = time;
ok( RlockTest::wait_until(sub { $hostile->connections('rlock_subscriber') > $subscribers }, 10),
	'the subscriber connection with half a push is dropped and made again');
my $took = time - $t0;
cmp_ok($took, '<', 1 + 1.5,
	sprintf('within rlock.command_timeout (1 s) and a margin (%.1f s)', $took));
like(status($node, 'last_error'), qr/a reply left incomplete for longer than rlock\.command_timeout/,
	'rlock_status() says why');
$holder->query_safe('COMMIT');
my ($out, $err) = RlockTest::collect($waiter);
is($out, 't', 'the waiter is served once the holder commits');
$holder->quit;
$waiter->quit;

is(RlockTest::worker_pid($node), $worker, 'the worker is the same process at the end');
unlike(slurp_file($node->logfile), qr/TRAP|terminated by signal/, 'no crash in the log');

$node->stop;
$hostile->stop;
$redis->stop;
done_testing();
