# The bound on a line's run of hand-offs (rlock.handoff_limit), release
# by release, with no other client library: three sessions of one
# instance take turns on a key, and MONITOR shows for each release
# whether the next local try went out right behind it (in the same write,
# so that Redis runs the two back to back: nothing else between them while
# a second client sends PING after PING) or not (held back).
#
# - nobody else listens on the lock's channel: every release is a hand-off;
# - a passive subscriber listens (redis-cli SUBSCRIBE would do): every
#   fifth release (rlock.handoff_limit = 4) goes without a try behind it,
#   with the yield mark behind it instead, which keeps rlock's waiters
#   of every instance off the freed lock for a millisecond;
#   0 after a reload: none; 2: every third;
# - the first waiter of a line held back gives up before it tries
#   (cancelled, or its wait over): the next waiter takes the free lock at
#   once, not when its timer (the lease of the lock it waits for) runs
#   out.  The worker is stopped (SIGSTOP) while the release and the end of
#   that waiter queue up, so that it meets them in this order.
use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use POSIX ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Resp;
use RlockTest::TLS;

plan skip_all => 'the line does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('bound', $redis,
	conf => [ 'log_min_messages = warning', 'log_statement = none' ]);
my $worker = RlockTest::worker_pid($node);

my %sha = map {
	$_ => sha1_hex(RlockTest::script_text(
			($ENV{TESTDIR} // '.') . "/src/kinds/plain/$_.lua"))
} qw(acquire release yield);

sub channel { return 'redisson_lock__channel:{' . $_[0] . '}' }

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	return { psql => $s, pid => $s->query_safe('SELECT pg_backend_pid()') };
}

sub waiting
{
	my ($key) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM rlock_locks WHERE key = '$key' AND state = 'waiting'");
}

sub set_limit
{
	my ($limit) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET rlock.handoff_limit = $limit; SELECT pg_reload_conf()");
	RlockTest::wait_until(
		sub { $node->safe_psql('postgres', 'SHOW rlock.handoff_limit') eq $limit },
		10) or die "rlock.handoff_limit did not become $limit";
}

# The first session takes $key, the others queue for it in their order.
# Returns the line, holder first.
sub line_up
{
	my ($key, @line) = @_;
	$line[0]{psql}->query_safe("SELECT rlock_session_try('$key')") eq 't'
	  or die "$key is not free";
	for my $i (1 .. $#line)
	{
		RlockTest::send_query($line[$i]{psql},
			"SELECT rlock_session_try('$key', '60 s');");
		RlockTest::wait_until(sub { waiting($key) == $i }, 10)
		  or die "session $i did not queue for $key";
	}
	return \@line;
}

# $n turns: the holder lets go (its release answered), the first in line
# is granted, the holder queues again at the back.
sub turns
{
	my ($key, $line, $n) = @_;
	for (1 .. $n)
	{
		my $holder = shift @$line;
		$holder->{psql}->query_safe("SELECT rlock_session_release('$key')");
		my ($out, $err) = RlockTest::collect($line->[0]{psql});
		die "the next in line was not granted $key: $err" unless $out eq 't';
		RlockTest::send_query($holder->{psql},
			"SELECT rlock_session_try('$key', '60 s');");
		RlockTest::wait_until(sub { waiting($key) == @$line }, 10)
		  or die "the holder of $key did not queue again";
		push @$line, $holder;
	}
}

# End a line: its waiters are cancelled, its holder lets go.
sub disband
{
	my ($key, $line) = @_;
	my ($holder, @rest) = @$line;
	for my $s (@rest)
	{
		$node->safe_psql('postgres', "SELECT pg_cancel_backend($s->{pid})");
		RlockTest::collect($s->{psql});
	}
	$holder->{psql}->query_safe("SELECT rlock_session_release('$key')");
}

# A second client sends PING after PING until stopped: a command of it
# lands between any two of the worker's that are not sent together.
sub start_pinger
{
	my $pid = fork() // die "fork: $!";
	return $pid if $pid;
	$SIG{TERM} = sub { POSIX::_exit(0) };
	my $c = RlockTest::Resp->connect($redis->port);
	while (1)
	{
		$c->call('PING');
		usleep(100);
	}
}

sub stop_pinger
{
	my ($pid) = @_;
	kill 'TERM', $pid;
	waitpid($pid, 0);
}

# For each release of $key among the MONITOR lines, in order: 1 if the
# next command Redis ran was the try of $key sent with it (same
# connection, no PING of the pinger in between), y if it was the yield
# that leaves the freed lock to other clients than rlock for a moment
# (the mark named after $key), 0 if neither.  No clock is read: Redis
# may be put off the CPU between two commands of one write on a loaded
# machine, and a try held back for 2 ms lets dozens of PINGs in first.
sub handed
{
	my ($key, @lines) = @_;
	my @cmds;
	for my $line (@lines)
	{
		# commands run by scripts show as [db lua]: not clients'
		next unless $line =~ /^([\d.]+) \[\d+ ([\d.:]+)\] (.*)$/;
		my ($at, $client, $args) = ($1, $2, $3);
		push @cmds, [ $at, $client, $args =~ /"((?:[^"\\]|\\.)*)"/g ];
	}
	my @handed;
	for my $i (0 .. $#cmds)
	{
		my ($at, $client, $cmd, $sha, undef, $k) = @{ $cmds[$i] };
		next unless $cmd eq 'EVALSHA' && $sha eq $sha{release} && $k eq $key;
		my ($next_at, $next_client, $next_cmd, $next_sha, undef, $next_k) =
		  @{ $cmds[ $i + 1 ] // [ 0, '', '', '', '', '' ] };
		my $next = $next_client eq $client && $next_cmd eq 'EVALSHA';
		my $mark =
		    ($next && $next_sha eq $sha{acquire} && $next_k eq $key) ? 1
		  : ($next && $next_sha eq $sha{yield} && $next_k eq "rlock_yield:{$key}") ? 'y'
		  : 0;
		note(sprintf('release %d of %s: next %s %s %s after %.3f ms',
				scalar(@handed) + 1, $key, $next_client eq $client ? 'same' : 'other',
				$next_cmd, substr($next_sha // '', 0, 8), ($next_at - $at) * 1000))
		  if $mark eq '0';
		push @handed, $mark;
	}
	return join('', @handed);
}

# $n turns on the line of $key under MONITOR, a pinger running; returns
# what handed() says of them.
sub watched_turns
{
	my ($key, $line, $n) = @_;
	my $mon = $redis->monitor;
	my $pinger = start_pinger();
	turns($key, $line, $n);
	stop_pinger($pinger);
	return handed($key, $mon->drain(0.3));
}

my @s = map { session() } 1 .. 3;

#---- nobody else listens ----

my $key = 'bound:own';
my $line = line_up($key, @s);
ok(RlockTest::wait_for_subscribers($redis, $key, 1, 10),
	'the line subscribed, and nobody else');
is(watched_turns($key, $line, 12), '1' x 12,
	'nobody else listens: each of 12 releases has the next try right behind it');
disband($key, $line);

#---- someone else listens ----

$key = 'bound:shared';
my $other = RlockTest::Resp->connect($redis->port);
$other->call('SUBSCRIBE',
	map { channel($_) } qw(bound:shared bound:cancel bound:deadline));
$line = line_up($key, @s);
ok(RlockTest::wait_for_subscribers($redis, $key, 2, 10),
	'the line subscribed, and one other client');
is(watched_turns($key, $line, 15), '1111y' x 3,
	'someone else listens: each fifth release goes without a try behind it '
	  . '(rlock.handoff_limit = 4), and yields the lock to other clients');
set_limit(0);
is(watched_turns($key, $line, 6), '1' x 6, 'rlock.handoff_limit = 0: no bound');
set_limit(2);
# the run counted on while it was not bounded
is(watched_turns($key, $line, 6), 'y11y11',
	'rlock.handoff_limit = 2, read at a reload: each third release');
disband($key, $line);

#---- the first waiter of a line held back gives up ----

set_limit(1);

# the worker meets what is queued meanwhile in its order once it goes on
sub stop_worker { kill 'STOP', $worker }
sub go_on_worker { kill 'CONT', $worker }
END { go_on_worker() if $worker }

# Cancelled: the holder's release, then the first waiter's cancel.
$key = 'bound:cancel';
my ($x, $y, $z) = @s;
line_up($key, $x, $y, $z);
# a hand-off to y, whose release is then held back; the line is z, x
$x->{psql}->query_safe("SELECT rlock_session_release('$key')");
is((RlockTest::collect($y->{psql}))[0], 't', '[cancel] y is handed the lock');
RlockTest::send_query($x->{psql}, "SELECT rlock_session_try('$key', '60 s');");
ok(RlockTest::wait_until(sub { waiting($key) == 2 }, 10),
	'[cancel] z and x wait');

stop_worker();
RlockTest::send_query($y->{psql}, "SELECT rlock_session_release('$key');");
ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $y->{pid}) == 1 }, 10),
	'[cancel] y\'s release waits for the stopped worker');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($z->{pid})");
my (undef, $err) = RlockTest::collect($z->{psql});
like($err, qr/57014/, '[cancel] z, first in line, is cancelled');
go_on_worker();
is((RlockTest::collect($y->{psql}))[0], 't', '[cancel] y let go');
ok(RlockTest::wait_until(sub { RlockTest::count_active($node, $x->{pid}) == 0 }, 3),
	'[cancel] x takes the free lock at once, not when its lease runs out');
is((RlockTest::collect($x->{psql}))[0], 't', '[cancel] x holds it');
$x->{psql}->query_safe("SELECT rlock_session_release('$key')");

# Out of time: the first waiter's wait ends while the worker is stopped.
$key = 'bound:deadline';
line_up($key, $x, $y);
my $t0 = time;
RlockTest::send_query($z->{psql}, "SELECT rlock_session_try('$key', '6 s');");
ok(RlockTest::wait_until(sub { waiting($key) == 2 }, 10),
	'[deadline] y and z wait');
$x->{psql}->query_safe("SELECT rlock_session_release('$key')");
is((RlockTest::collect($y->{psql}))[0], 't', '[deadline] y is handed the lock');
RlockTest::send_query($x->{psql}, "SELECT rlock_session_try('$key', '60 s');");
ok(RlockTest::wait_until(sub { waiting($key) == 2 }, 10),
	'[deadline] z and x wait');
# z and x joined the line without trying, and try at their deadline
# whatever happens: a new subscription makes them try, and wait after
my $mon = $redis->monitor;
my $tries = 0;
$redis->cmd('CLIENT', 'KILL', 'ID', $redis->client_id('rlock_subscriber'));
ok( RlockTest::wait_until(
		sub {
			$tries += grep { /"EVALSHA" "$sha{acquire}" "\d+" "\Q$key\E"/ }
			  $mon->drain(0.05);
			return $tries >= 2 && waiting($key) == 2
			  && $redis->subscribers($key) == 2;
		},
		10),
	'[deadline] subscribed again, z and x tried, and wait');
# stopped for 1 s, less than a backend gives the worker to take a
# request (rlock.connect_timeout, here 1 s, and 1 s of grace)
ok(RlockTest::wait_until(sub { time > $t0 + 5.5 }, 10),
	'[deadline] z\'s wait is nearly over');
stop_worker();
RlockTest::send_query($y->{psql}, "SELECT rlock_session_release('$key');");
ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $y->{pid}) == 1 }, 10),
	'[deadline] y\'s release waits for the stopped worker');
ok(RlockTest::wait_until(sub { time > $t0 + 6.5 }, 10),
	'[deadline] z\'s wait is over');
go_on_worker();
is((RlockTest::collect($y->{psql}))[0], 't', '[deadline] y let go');
is((RlockTest::collect($z->{psql}))[0], 'f', '[deadline] z did not get the lock');
ok(RlockTest::wait_until(sub { RlockTest::count_active($node, $x->{pid}) == 0 }, 3),
	'[deadline] x takes the free lock at once, not when its lease runs out');
is((RlockTest::collect($x->{psql}))[0], 't', '[deadline] x holds it');
$x->{psql}->query_safe("SELECT rlock_session_release('$key')");

$_->{psql}->quit for @s;
$node->stop;
$redis->stop;
done_testing();
