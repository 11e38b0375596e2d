# Which Sentinels rlock trusts (rlock.topology = sentinel): only those of
# rlock.nodes.  A Sentinel learns its peers from hello messages on the
# data nodes, and a Redis user allowed nothing but PUBLISH on
# __sentinel__:hello can forge one; here such a user plants addresses
# where the test listens (RlockTest::Recorder), and the real Sentinels
# list them in SENTINEL SENTINELS.
#
# - a planted Sentinel that answers like one and names a planted primary:
#   with every configured Sentinel stopped, rlock never connects to
#   either (nothing received, so no AUTH with the Sentinel password or
#   the data password), every lock it grants meanwhile is on the real
#   primary, and it uses a configured Sentinel again once one is back;
# - twenty planted addresses that never answer: with the first
#   configured Sentinel down, a new instance locks within 10 s of its
#   start, and with the Sentinel in use stopped, rlock is on another
#   configured one within a few seconds (not the 21 s of trying each
#   planted one);
# - rlock_status() counts the planted Sentinels as known, as the asked
#   Sentinel lists them, and as reachable only when it sees them up;
# - a planted run id too long for rlock's reply reader: the list of peers
#   is refused once, then not asked for a while (rlock keeps its
#   Sentinel connection and counts the Sentinels of rlock.nodes only);
# - no connection to any planted address ever came from PostgreSQL;
# - what Redis Sentinel itself takes from such a message: one with a
#   higher configuration epoch makes every Sentinel name its primary
#   (why doc/deployments.md says to keep the channel from other users).

use strict;
use warnings;

use File::Temp ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Recorder;
use RlockTest::Resp;
use RlockTest::Sentinel;

plan skip_all =>
  'which addresses rlock connects to does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

# From a Sentinel stopped to rlock asking another one: the connection's
# back-off (at most 1 s), rlock.connect_timeout (1 s) for the next one,
# and some slack for a loaded machine.
my $SWITCH_BOUND = 5;

mkdir "$PostgreSQL::Test::Utils::tmp_check/redis";
my $dep = RlockTest::Sentinel->start(
	dir => "$PostgreSQL::Test::Utils::tmp_check/redis",
	replicas => 1,
	sentinels => 3,
	master_name => 'main',
	data_password => 'datapw',
	sentinel_password => 'sentpw');
my $data_pw = RlockTest::password_file(File::Temp::tempdir(CLEANUP => 1),
	'datapw');
my $sentinel_pw =
  RlockTest::password_file(File::Temp::tempdir(CLEANUP => 1), 'sentpw');
my $primary = $dep->primary;
my @sp = $dep->sentinel_ports;

sub instance
{
	my ($name) = @_;
	return RlockTest::node($name, $primary,
		conf => [
			"rlock.topology = 'sentinel'",
			"rlock.nodes = '" . $dep->nodes_setting . "'",
			"rlock.sentinel_master = 'main'",
			"rlock.sentinel_password_file = '$sentinel_pw'",
			"rlock.password_file = '$data_pw'" ]);
}

sub status
{
	my ($node, $cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM rlock_status()");
}

sub asked_port
{
	my ($node) = @_;
	return status($node, 'sentinel') =~ /:(\d+)$/ ? $1 : '';
}

#---- the attacker: a Redis user that may publish hello messages only ----

for my $n (@{ $dep->data_nodes })
{
	is($n->cmd('ACL', 'SETUSER', 'hello', 'on', '>hellopw', 'resetkeys',
			'resetchannels', '&__sentinel__:hello', '-@all', '+publish'),
		'OK', 'a user limited to PUBLISH on __sentinel__:hello, on port '
		  . $n->port);
}
my $attacker = RlockTest::Resp->connect($primary->port);
is($attacker->call('AUTH', 'hello', 'hellopw'), 'OK', 'the attacker logs in');
like($attacker->call('GET', 'k')->{error} // '', qr/^NOPERM/,
	'it may not read a key');
like($attacker->call('PUBLISH', 'other', 'x')->{error} // '', qr/^NOPERM/,
	'nor publish on another channel');

# A hello message says: a Sentinel at this address (with this run id and
# epoch) monitors this primary (name, address, configuration epoch).  The
# epochs are 0 so that no Sentinel takes the primary's address from it.
sub plant
{
	my ($port) = @_;
	return plant_epoch($primary->rlock_port, 0, $port);
}

# A hello message from a new Sentinel (at $port, or nowhere) naming the
# primary at $primary_port with configuration epoch $epoch
sub plant_epoch
{
	my ($primary_port, $epoch, $port) = @_;
	my $runid = join('', map { sprintf('%x', int(rand(16))) } 1 .. 40);
	return $attacker->call('PUBLISH', '__sentinel__:hello',
		'127.0.0.1,' . ($port // RlockTest::free_port())
		  . ",$runid,$epoch,main,127.0.0.1,$primary_port,$epoch");
}

# The ports Sentinel $i lists as its peers
sub listed
{
	my ($i) = @_;
	my $peers = eval {
		$dep->sentinel_cmd($i, 'SENTINEL', 'SENTINELS', 'main');
	};
	return () unless ref $peers eq 'ARRAY';
	return map { my %f = @$_; $f{port} } @$peers;
}

sub all_list
{
	my (@ports) = @_;
	for my $i (0 .. 2)
	{
		my %have = map { $_ => 1 } listed($i);
		return 0 if grep { !$have{$_} } @ports;
	}
	return 1;
}

#---- a planted Sentinel that names a planted primary ----

my $fake_primary = RlockTest::Recorder->start;
my $fake = RlockTest::Recorder->start(names_primary => $fake_primary->port);
cmp_ok(plant($fake->port), '>=', 1, 'the hello message reached a subscriber');
ok(RlockTest::wait_until(sub { all_list($fake->port) }, 10),
	'the three Sentinels list the planted address as a Sentinel')
  or diag(join(' ', listed(0)));

my $node = instance('trust');
ok(RlockTest::wait_for_redis($node, 15), 'rlock finds the primary');
ok(RlockTest::wait_until(sub { status($node, 'sentinels_known') == 4 }, 10),
	'rlock_status: the planted Sentinel counted as known (3 + 1)')
  or diag(status($node, '*'));

# the owner rlock writes for this session
my $session = $node->background_psql('postgres', on_error_stop => 0);
$session->query_safe("SELECT rlock_session_try('trust:me')");
my $me = $session->query(
	"SELECT owner FROM rlock_locks WHERE key = 'trust:me'");
like($me, qr/^[0-9a-f-]{36}:\d+$/, "the session's owner: $me");
$session->query_safe("SELECT rlock_session_release('trust:me')");

# every configured Sentinel down: rlock keeps the primary it knows
$dep->stop_sentinel($_) for 0 .. 2;
$fake->mark;
$fake_primary->mark;
ok(RlockTest::wait_until(sub { status($node, 'sentinel') eq '' }, 10),
	'rlock_status: no Sentinel answers');

# Locks taken for four seconds, a few rounds of the configured Sentinels
# (the back-off between rounds is at most 1 s): each is granted, and the
# real primary holds it for this session.
my ($granted, $on_primary, $n) = (0, 0, 0);
my $until = time + 4;
while (time < $until)
{
	my $key = 'trust:k' . $n++;
	$granted++
	  if $session->query("SELECT rlock_session_try('$key')") eq 't';
	$on_primary++ if join(',', @{ $primary->owners($key) }) eq $me;
	$session->query("SELECT rlock_session_release('$key')");
}
is($granted, $n, "every lock taken meanwhile was granted ($n)");
is($on_primary, $n, 'the real primary held each for this session');

my @after = grep { $_->{period} >= 1 } $fake->connections;
is(scalar(@after), 0,
	'the planted Sentinel received no connection while the configured ones were down')
  or diag(join("\n", map { "$_->{pid} $_->{comm}: $_->{bytes}" } @after));
my @named = $fake_primary->connections;
is(scalar(@named), 0, 'the primary it names received no connection at all')
  or diag(join("\n", map { "$_->{pid} $_->{comm}: $_->{bytes}" } @named));

# a configured Sentinel back: rlock uses it
$dep->start_sentinel(1);
ok(RlockTest::wait_until(sub { asked_port($node) eq $sp[1] }, $SWITCH_BOUND),
	"rlock asks the configured Sentinel back up within $SWITCH_BOUND s")
  or diag(status($node, '*'));
is($session->query("SELECT rlock_session_try('trust:back')"), 't',
	'a lock is granted');
is_deeply($primary->owners('trust:back'), [$me], 'on the real primary');
$session->query("SELECT rlock_session_release('trust:back')");
$dep->start_sentinel($_) for (0, 2);

#---- twenty planted addresses that never answer ----

my $silent = RlockTest::Recorder->start(ports => 20);
plant($_) for $silent->ports;
ok(RlockTest::wait_until(sub { all_list($silent->ports) }, 10),
	'the three Sentinels list the twenty planted addresses');
ok(RlockTest::wait_until(sub { status($node, 'sentinels_known') == 24 }, 10),
	'rlock_status: 24 Sentinels known, as the asked one lists them')
  or diag(status($node, '*'));

# a new instance with the first configured Sentinel down
$dep->stop_sentinel(0);
my $t0 = time;
my $late = instance('trust_late');
ok(RlockTest::wait_for_redis($late, 10),
	'a new instance, first configured Sentinel down: a lock works');
my $took = time - $t0;
cmp_ok($took, '<', 10, "including its start, within 10 s ($took s)");
is(asked_port($late), $sp[1], 'it asks the second configured Sentinel');
# known: its three and the 21 others Sentinel 1 lists; reachable: Sentinel
# 1 itself, Sentinel 2 and the planted one that answers, as Sentinel 1
# sees them (the silent twenty are down in its view)
ok(RlockTest::wait_until(
		sub { status($late, 'sentinels_known, sentinels_reachable') eq '24|3' },
		10),
	'rlock_status: 24 Sentinels known, 3 reachable')
  or diag(status($late, '*'));
$late->stop;

# rlock on the last configured Sentinel, which stops: the next one it
# asks is a configured one, not a planted one
$dep->stop_sentinel(1);
ok(RlockTest::wait_until(sub { asked_port($node) eq $sp[2] }, $SWITCH_BOUND),
	'with the first two stopped, rlock asks the third');
$dep->start_sentinel($_) for (0, 1);
$t0 = time;
$dep->stop_sentinel(2);
ok(RlockTest::wait_until(
		sub { my $p = asked_port($node); $p eq $sp[0] || $p eq $sp[1] },
		$SWITCH_BOUND),
	"the third stopped: rlock asks a configured Sentinel within $SWITCH_BOUND s")
  or diag(status($node, '*'));
$took = time - $t0;
diag(sprintf('without a Sentinel for %.1f s', $took));
ok(RlockTest::wait_for_redis($node, 5), 'and a lock works');
$dep->start_sentinel(2);

#---- a planted Sentinel whose run id is longer than rlock reads ----

# A hello message's run id becomes that peer's name and run id in
# SENTINEL SENTINELS: one of 1,100,000 bytes is over the reply reader's
# limit for a string (1 MiB), so the list cannot be read.  The list is
# for rlock_status() only: rlock drops that connection once, stops asking
# for the list for a while, and stays with the Sentinel it asks, rather
# than drop its Sentinel connection at each question for the list (every
# 5 s).
sub rlock_sentinel_connections
{
	my %seen;
	for my $i (0 .. 2)
	{
		my $list = eval { $dep->sentinel_cmd($i, 'CLIENT', 'LIST') } // '';
		$seen{"$sp[$i]:$1"} = 1 for $list =~ /^id=(\d+) .*name=rlock_sentinel /mg;
	}
	return keys %seen;
}
ok(RlockTest::wait_until(sub { asked_port($node) ne '' }, 10),
	'rlock asks a Sentinel');
my $asked_before = asked_port($node);
my $long_port = RlockTest::free_port();
$attacker->call('PUBLISH', '__sentinel__:hello',
	"127.0.0.1,$long_port," . ('r' x 1_100_000) . ',0,main,127.0.0.1,'
	  . $primary->rlock_port . ',0');
ok(RlockTest::wait_until(sub { all_list($long_port) }, 10),
	'the three Sentinels list a peer whose run id is 1,100,000 bytes');
my %connections;
my $watch_until = time + 20;
while (time < $watch_until)
{
	$connections{$_} = 1 for rlock_sentinel_connections();
	usleep(200_000);
}
my $log = slurp_file($node->logfile);
like($log, qr/rlock dropped its Sentinel connection to Redis at [^\n]*: a reply rlock does not accept: a string of 1100000 bytes/,
	'the list was refused once');
like($log, qr/rlock stops asking the Sentinels for their peers for \d+ minutes/,
	'and rlock says it stops asking for it');
cmp_ok(scalar(keys %connections), '<=', 2,
	'in 20 s, one Sentinel connection made again, not one every 5 s')
  or diag(join(' ', sort keys %connections));
is(asked_port($node), $asked_before, 'rlock asks the Sentinel it asked before');
is(status($node, 'sentinels_known'), 3,
	'rlock_status: the Sentinels of rlock.nodes counted, the list not known');
ok(RlockTest::wait_for_redis($node, 5), 'a lock works');

#---- who ever connected to a planted address ----

my @from_pg = grep { $_->{comm} eq 'postgres' }
  ($fake->connections, $fake_primary->connections, $silent->connections);
is(scalar(@from_pg), 0,
	'no connection to a planted address came from PostgreSQL')
  or diag(join("\n", map { "$_->{port} $_->{pid}: $_->{bytes}" } @from_pg));
my @datapw = grep { $_->{bytes} =~ /datapw/ }
  ($fake->connections, $fake_primary->connections, $silent->connections);
is(scalar(@datapw), 0, 'no planted address ever received the data password');
my @sentinels =
  grep { $_->{comm} =~ /^redis-(sentinel|server)$/ } $silent->connections;
diag(scalar(@sentinels)
	  . ' connections to the silent addresses came from the real Sentinels');

$session->quit;
$node->stop;

#---- what the Sentinels themselves take from a hello message ----

# A hello message with a higher configuration epoch than the primary's
# moves the primary, for every Sentinel that receives it: the reason to
# keep __sentinel__:hello from every Redis user but the Sentinels' own
# (doc/deployments.md).  rlock trusts what a configured Sentinel names.
plant_epoch($fake_primary->port, 1000);
ok(RlockTest::wait_until(
		sub {
			for my $i (0 .. 2)
			{
				my $a = eval {
					$dep->sentinel_cmd($i, 'SENTINEL',
						'GET-MASTER-ADDR-BY-NAME', 'main');
				};
				return 0
				  unless ref $a eq 'ARRAY'
				  && $a->[1] == $fake_primary->port;
			}
			return 1;
		},
		10),
	'a hello with a higher configuration epoch makes the Sentinels name its primary');

$_->stop for ($fake, $fake_primary, $silent);
$dep->stop;
done_testing();
