# The worker's sockets in a Redis Cluster larger than its descriptor
# budget (a third of what max_files_per_process leaves free).
#
# - A primary's connections are made when a key of its slots is used,
#   not for every primary of the map: with eighteen primaries and room for
#   about twenty-eight sockets, a lock on a key of every primary at once is
#   granted, and so are waiters on twelve of them (a subscriber each),
#   the idle connection used least recently making room when none is
#   left; no session sees an error.
# - A map with more primaries than the budget allows connections is
#   refused, with a clear error in rlock_status() and in the requests.
#   With max_files_per_process at its least, 64, the budget is at most
#   16 (64 less stdin, stdout and stderr, less PostgreSQL's 10 reserved,
#   over three, less the map's connection): eighteen primaries exceed it
#   whatever descriptors the postmaster inherited.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Cluster;

plan skip_all => 'socket budgets do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $cluster = RlockTest::Cluster->start(primaries => 18, replicas => 0);
my @primaries = $cluster->primaries;
is(scalar(@primaries), 18, 'eighteen primaries');
my $seeds = '127.0.0.1:' . $primaries[0]->rlock_port;

# a key on every primary
my %key_of;
for (my $i = 0; keys %key_of < 18 && $i < 10000; $i++)
{
	my $owner = $cluster->owner($cluster->slot("sock:$i"));
	$key_of{ $owner->port } //= "sock:$i";
}
my @keys = map { $key_of{ $_->port } } @primaries;
is(scalar(grep { defined } @keys), 18, 'a key of every primary');

sub cluster_node
{
	my ($name, $files) = @_;
	return RlockTest::node($name, $primaries[0],
		conf => [
			"rlock.topology = 'cluster'",
			"rlock.nodes = '$seeds'",
			"max_files_per_process = $files",
			'log_min_messages = warning' ]);
}

sub status
{
	my ($node, $cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM rlock_status()");
}

#---- room for the primaries in use, not for all of them at once ----

my $node = cluster_node('budget', 100);
ok(RlockTest::wait_until(sub { status($node, 'cluster_primaries') eq '18' }, 20),
	'the map of eighteen primaries is taken');
my $worker = RlockTest::worker_pid($node);
sub sockets
{
	opendir(my $d, "/proc/$worker/fd") or return -1;
	my $n = grep { (readlink("/proc/$worker/fd/$_") // '') =~ /^socket:/ } readdir($d);
	closedir($d);
	return $n;
}
cmp_ok(sockets(), '<=', 4, 'no connection to the primaries before a key is used');

my $holder = $node->background_psql('postgres', on_error_stop => 0);
is($holder->query(join(', ', 'SELECT ' . join(', ', map { "rlock_session_try('$_')" } @keys))),
	join('|', ('t') x 18), 'a lock on a key of every primary, all granted');
is($holder->{stderr}, '', 'without an error');

# twelve waiters, each needing a subscriber on its key's primary
my @waiters = map { $node->background_psql('postgres', on_error_stop => 0) } 0 .. 11;
RlockTest::send_query($waiters[$_], "SELECT rlock_session_try('$keys[$_]', '30 s');") for 0 .. 11;
# eighteen command connections, twelve subscribers and the map's: more
# than the budget, so subscribing takes idle command connections' places
ok(RlockTest::wait_until(
		sub {
			(grep { $_->cmd('PUBSUB', 'SHARDNUMSUB', 'redisson_lock__channel:{' . $key_of{ $_->port } . '}')->[1] == 1 }
				@primaries[ 0 .. 11 ]) == 12;
		},
		20),
	'every waiter is subscribed on its primary');
$holder->query_safe('SELECT rlock_release_all()');
for my $i (0 .. 11)
{
	my ($out, $err) = RlockTest::collect($waiters[$i]);
	is($out, 't', "waiter $i is woken and takes its lock");
	is($err, '', "waiter $i: no error");
	$waiters[$i]->quit;
}
is(status($node, 'worker_pid'), $worker, 'the same worker throughout');
$holder->quit;
$node->stop;

#---- a map larger than the budget: refused, clearly ----

my $small = cluster_node('small', 64);
ok(RlockTest::wait_until(
		sub { status($small, 'last_error') =~ /the Redis Cluster has 18 primaries, more than the \d+ connections rlock may hold open/ },
		20),
	'rlock_status: the map is refused, and why');
my ($rc, $out, $err) = $small->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT rlock_try('$keys[0]')");
like($err, qr/ERROR:  58030: could not reach Redis for lock "sock:\d+"\n.*DETAIL:  .*the Redis Cluster has 18 primaries, more than the \d+ connections/s,
	'a lock fails with 58030, saying why');
like(slurp_file($small->logfile),
	qr/WARNING:  rlock does not use the slot map of the Redis Cluster at \S+/,
	'and the log says so');
$small->stop;
$cluster->stop;
done_testing();
