# What a Sentinel of rlock.nodes can make the worker do, within bounds.
# Three stand-in Sentinels (a child process of this test on three
# loopback ports) answer as Redis Sentinels do, each listing the other
# two by IP address in SENTINEL SENTINELS, and name real Redis servers as
# the primary.
#
# - rlock.nodes naming the Sentinels by host name ("localhost"): the
#   peers the asked Sentinel lists by IP address are those same
#   Sentinels, and rlock_status() counts three Sentinels, not five;
# - a Sentinel of rlock.nodes that sends +switch-master without pause and
#   names another of two primaries at each question: rlock follows what
#   it names (it is trusted) but asks at most ten times a second, not as
#   fast as the messages come, and the worker stays the same process.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Recorder;
use RlockTest::Redis;
use RlockTest::Relay;

plan skip_all => 'the stand-in Sentinels speak plain TCP: the plain round runs this'
  if RlockTest::TLS::everywhere();

#---- the stand-in Sentinels ----

package StandInSentinels;

use IO::Select;
use POSIX ();
use Time::HiRes ();
use parent -norequire, 'RlockTest::Relay';

sub _bulk { return '$' . length($_[0]) . "\r\n$_[0]\r\n" }

# One entry of SENTINEL SENTINELS, as Redis 7.0 writes it
sub _peer
{
	my ($port) = @_;
	my @f = (
		name => sprintf('%040x', $port), ip => '127.0.0.1', port => $port,
		runid => sprintf('%040x', $port), flags => 'sentinel',
		'link-pending-commands' => 0, 'link-refcount' => 1,
		'last-ping-sent' => 0, 'last-ok-ping-reply' => 100,
		'last-ping-reply' => 100, 'down-after-milliseconds' => 1000,
		'last-hello-message' => 500, 'voted-leader' => '?',
		'voted-leader-epoch' => 0);
	return '*' . scalar(@f) . "\r\n" . join('', map { _bulk($_) } @f);
}

# Control lines: "primary <port>" names that primary; "flip <port>
# <port>" names each in turn, one per question, and sends +switch-master
# to every subscriber without pause; "asked" answers the number of
# SENTINEL GET-MASTER-ADDR-BY-NAME questions so far.
sub _serve
{
	my (@listen) = ($_[0], @_[ 3 .. $#_ ]);
	my $ctl = $_[1];
	my $sel = IO::Select->new(@listen, $ctl);
	my %listener = map { fileno($_) => $_ } @listen;
	my @ports = map { $_->sockport } @listen;
	my (%conn, %subscribed, @flip);
	my ($primary, $asked, $ctlbuf) = (0, 0, '');
	local $SIG{TERM} = sub { POSIX::_exit(0) };
	while (1)
	{
		for my $s ($sel->can_read(@flip ? 0.001 : 0.1))
		{
			if (my $l = $listener{ fileno($s) })
			{
				my $c = $l->accept or next;
				$c->blocking(0);
				$sel->add($c);
				$conn{ fileno($c) } = { sock => $c, in => '', port => $l->sockport };
				next;
			}
			if ($s == $ctl)
			{
				POSIX::_exit(0) unless sysread($ctl, $ctlbuf, 4096, length $ctlbuf);
				while ($ctlbuf =~ s/^(.*)\n//)
				{
					my @op = split ' ', $1;
					if ($op[0] eq 'primary')
					{
						($primary, @flip) = ($op[1]);
					}
					elsif ($op[0] eq 'flip')
					{
						@flip = @op[ 1, 2 ];
					}
					syswrite($ctl, ($op[0] eq 'asked' ? $asked : 'ok') . "\n");
				}
				next;
			}
			my $c = $conn{ fileno($s) } or next;
			my $got = sysread($s, $c->{in}, 65536, length $c->{in});
			unless ($got)
			{
				$sel->remove($s);
				delete $subscribed{ fileno($s) };
				delete $conn{ fileno($s) };
				close $s;
				next;
			}
			for my $cmd (RlockTest::Recorder::parse_commands(\$c->{in}))
			{
				my ($name, $sub) = map { uc($_ // '') } @$cmd[ 0, 1 ];
				my $out = "+OK\r\n";
				if ($name eq 'PING')
				{
					$out = "+PONG\r\n";
				}
				elsif ($name eq 'SENTINEL' && $sub eq 'GET-MASTER-ADDR-BY-NAME')
				{
					$asked++;
					my $port = @flip ? $flip[ $asked % 2 ] : $primary;
					$out = "*2\r\n" . _bulk('127.0.0.1') . _bulk($port);
				}
				elsif ($name eq 'SENTINEL' && $sub eq 'SENTINELS')
				{
					my @peers = grep { $_ != $c->{port} } @ports;
					$out = '*' . scalar(@peers) . "\r\n" . join('', map { _peer($_) } @peers);
				}
				elsif ($name eq 'SUBSCRIBE')
				{
					$out = "*3\r\n" . _bulk('subscribe') . _bulk($cmd->[1]) . ":1\r\n";
					$subscribed{ fileno($s) } = $s;
				}
				syswrite($s, $out);
			}
		}
		next unless @flip;
		syswrite($_, "*3\r\n" . _bulk('message') . _bulk('+switch-master')
			  . _bulk("main 127.0.0.1 $flip[0] 127.0.0.1 $flip[1]"))
		  for values %subscribed;
	}
}

package main;

my $ra = RlockTest::Redis->start;
my $rb = RlockTest::Redis->start;
my $sentinels = StandInSentinels->start(undef, ports => 3);
my @sp = $sentinels->ports;
is($sentinels->ask('primary ' . $ra->rlock_port), 'ok', 'the stand-ins name a primary');

sub instance
{
	my ($name, $host) = @_;
	return RlockTest::node($name, $ra,
		conf => [
			"rlock.topology = 'sentinel'",
			"rlock.nodes = '" . join(',', map { "$host:$_" } @sp) . "'",
			"rlock.sentinel_master = 'main'" ]);
}

sub status
{
	my ($node, $cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM rlock_status()");
}

#---- Sentinels named by host name ----

my $by_ip = instance('by_ip', '127.0.0.1');
my $by_name = instance('by_name', 'localhost');
for my $node ($by_ip, $by_name)
{
	my $how = $node->name eq 'by_ip' ? 'by IP address' : 'by host name';
	ok(RlockTest::wait_for_redis($node, 10), "Sentinels $how: a lock works");
	# the list of peers is asked with the first question, and then every
	# fifth: once the asked Sentinel's two peers are seen up, the counts
	# are settled
	ok( RlockTest::wait_until(
			sub { status($node, 'sentinels_known, sentinels_reachable') eq '3|3' }, 10),
		"Sentinels $how: rlock_status() counts three Sentinels, all reachable")
	  or diag(status($node, 'sentinel, sentinels_known, sentinels_reachable'));
}
$by_ip->stop;
$by_name->stop;

#---- a Sentinel that names another primary at each question ----

my $node = instance('flip', '127.0.0.1');
ok(RlockTest::wait_for_redis($node, 10), 'a lock works');
my $worker = RlockTest::worker_pid($node);
my $asked_before = $sentinels->ask('asked');
my $follows_before = () = slurp_file($node->logfile) =~ /rlock follows a failover/g;
is($sentinels->ask('flip ' . $ra->rlock_port . ' ' . $rb->rlock_port), 'ok',
	'the Sentinel names each of two primaries in turn, and sends +switch-master without pause');
my $t0 = time;
usleep(5_000_000);
my $asked = $sentinels->ask('asked') - $asked_before;
my $took = time - $t0;
$sentinels->ask('primary ' . $ra->rlock_port);
my $follows = () = slurp_file($node->logfile) =~ /rlock follows a failover/g;
$follows -= $follows_before;
note(sprintf('in %.1f s: %d questions, %d failovers followed', $took, $asked, $follows));
cmp_ok($follows, '>=', 2, "rlock follows what its Sentinel names ($follows times)");
cmp_ok($asked, '<=', 10 * $took + 2,
	"at most ten questions a second, whatever the messages ($asked in "
	  . sprintf('%.1f s)', $took));
is(RlockTest::worker_pid($node), $worker, 'the worker is the same process');
ok(RlockTest::wait_for_redis($node, 10), 'the Sentinel steady again: a lock works');

$node->stop;
$sentinels->stop;
$ra->stop;
$rb->stop;
done_testing();
