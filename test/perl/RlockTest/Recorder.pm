
=pod

=head1 NAME

RlockTest::Recorder - listeners on loopback ports that keep every byte
they receive and note which process sent it; silent, or answering as a
Redis Sentinel that names a primary of the test's choosing

=head1 SYNOPSIS

  my $silent = RlockTest::Recorder->start(ports => 20);
  my $fake = RlockTest::Recorder->start(names_primary => $port);
  my @ports = $silent->ports;
  $fake->mark;                    # a new period begins
  for my $c ($fake->connections)  # every connection accepted so far
  {
      # $c->{port}, $c->{pid}, $c->{comm}, $c->{period}, $c->{bytes}
  }
  $fake->stop;

=head1 DESCRIPTION

A child process listens on the ports and accepts every connection.  When
it accepts one it looks up the process at the other end (the owner of
the client's socket in /proc, as the test's user can see it: pid 0 and
comm '?' when it cannot), and keeps what that connection sends (the first
64 KiB).

Silent, it never answers: a client waits for its own timeout, as with a
host that takes connections and then says nothing.  With names_primary,
it answers the way a Redis Sentinel would whose primary is at that port
on 127.0.0.1: AUTH, CLIENT and the like +OK, PING +PONG, INFO a
redis_mode of sentinel, SENTINEL GET-MASTER-ADDR-BY-NAME that address,
SENTINEL SENTINELS no peer, SUBSCRIBE the confirmation.

mark() first accepts whatever waits in the listeners' queues (a
connection made before the mark counts in the period before it), then
starts a new period: connections accepted from then on carry its number.

=cut

package RlockTest::Recorder;

use strict;
use warnings;

use IO::Handle;
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Socket qw(AF_UNIX SOCK_STREAM PF_UNSPEC);
use RlockTest::Relay;
use parent -norequire, 'RlockTest::Relay';

# What a connection's record keeps of what it received
my $KEEP = 65536;

sub start
{
	my ($class, %opt) = @_;
	my @listen;
	for (1 .. ($opt{ports} // 1))
	{
		push @listen, IO::Socket::INET->new(
			Listen => 64,
			LocalAddr => '127.0.0.1',
			LocalPort => 0,
			Proto => 'tcp',
			ReuseAddr => 1) or die "$class: cannot listen: $!";
	}
	socketpair(my $parent, my $child, AF_UNIX, SOCK_STREAM, PF_UNSPEC)
	  or die "$class: socketpair: $!";
	my $pid = fork();
	die "$class: fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		close $parent;
		_serve(\@listen, $child, $opt{names_primary});
		POSIX::_exit(0);
	}
	close $child;
	$parent->autoflush(1);
	my $self = bless {
		pid => $pid,
		ports => [ map { $_->sockport } @listen ],
		ctl => $parent,
	}, $class;
	$self->{port} = $self->{ports}[0];
	close $_ for @listen;
	return $self;
}

sub ports { @{ $_[0]{ports} } }

sub mark
{
	my ($self) = @_;
	my $answer = $self->ask('mark');
	die "recorder: no answer\n" unless defined $answer;
	return $answer;
}

# Every connection accepted so far, oldest first: hashes with the port
# it came to, the sender's pid and comm, the period it was accepted in
# (0 before the first mark) and the bytes it sent.
sub connections
{
	my ($self) = @_;
	my $answer = $self->ask('list');
	die "recorder: no answer\n" unless defined $answer;
	my @out;
	for my $rec (split / /, $answer)
	{
		my ($port, $pid, $comm, $period, $bytes) = split /,/, $rec, -1;
		push @out, {
			port => $port,
			pid => $pid,
			comm => pack('H*', $comm),
			period => $period,
			bytes => pack('H*', $bytes),
		};
	}
	return @out;
}

#---- the child ----

# The process that owns the client end of a loopback connection from
# $from to $to, as (pid, comm); (0, '?') when it is not to be found.
sub _owner
{
	my ($from, $to) = @_;
	my $local = sprintf('0100007F:%04X', $from);
	my $remote = sprintf('0100007F:%04X', $to);
	my $inode;
	open(my $fh, '<', '/proc/net/tcp') or return (0, '?');
	while (my $line = <$fh>)
	{
		my @f = split ' ', $line;
		next unless @f > 9 && $f[1] eq $local && $f[2] eq $remote;
		$inode = $f[9];
		last;
	}
	close $fh;
	return (0, '?') unless $inode;
	for my $fd (glob('/proc/[0-9]*/fd/*'))
	{
		my $link = readlink($fd);
		next unless defined $link && $link eq "socket:[$inode]";
		my ($pid) = $fd =~ m{^/proc/(\d+)/};
		my $comm = '?';
		if (open(my $c, '<', "/proc/$pid/comm"))
		{
			$comm = <$c> // '?';
			chomp $comm;
			close $c;
		}
		return ($pid, $comm);
	}
	return (0, '?');
}

sub _bulk { return '$' . length($_[0]) . "\r\n$_[0]\r\n" }

# The commands complete at the start of $$buf (arrays of bulk strings),
# removed from it; the stand-in servers of the tests use it too.
sub parse_commands
{
	my ($buf) = @_;
	my @cmds;
	while ($$buf =~ /^\*(\d+)\r\n/)
	{
		my $n = $1;
		my $at = length("*$n\r\n");
		my @args;
		for (1 .. $n)
		{
			return @cmds unless substr($$buf, $at) =~ /^\$(\d+)\r\n/;
			my $len = $1;
			$at += length("\$$len\r\n");
			return @cmds if length($$buf) < $at + $len + 2;
			push @args, substr($$buf, $at, $len);
			$at += $len + 2;
		}
		substr($$buf, 0, $at) = '';
		push @cmds, \@args;
	}
	return @cmds;
}

# What a Sentinel whose primary is at 127.0.0.1:$primary answers
sub _sentinel_answer
{
	my ($primary, @args) = @_;
	my $cmd = uc($args[0] // '');
	my $sub = uc($args[1] // '');
	return "+PONG\r\n" if $cmd eq 'PING';
	return _bulk("# Server\r\nredis_mode:sentinel\r\n") if $cmd eq 'INFO';
	return "*2\r\n" . _bulk('127.0.0.1') . _bulk($primary)
	  if $cmd eq 'SENTINEL' && $sub eq 'GET-MASTER-ADDR-BY-NAME';
	return "*0\r\n" if $cmd eq 'SENTINEL' && $sub eq 'SENTINELS';
	return "*3\r\n" . _bulk('subscribe') . _bulk($args[1] // '') . ":1\r\n"
	  if $cmd eq 'SUBSCRIBE';
	return ":0\r\n" if $cmd eq 'PUBLISH';
	return "+OK\r\n";
}

sub _serve
{
	my ($listen, $ctl, $primary) = @_;
	my $sel = IO::Select->new(@$listen, $ctl);
	my %listener = map { fileno($_) => $_ } @$listen;
	my %conn;    # by fileno: the record and what waits to be parsed
	my @records;
	my $period = 0;
	my $ctlbuf = '';
	local $SIG{TERM} = sub { POSIX::_exit(0) };
	$ctl->autoflush(1);
	$_->blocking(0) for @$listen;

	my $accept = sub {
		my ($l) = @_;
		my $c = $l->accept or return 0;
		my ($pid, $comm) = _owner($c->peerport, $l->sockport);
		my $rec = {
			port => $l->sockport,
			pid => $pid,
			comm => $comm,
			period => $period,
			bytes => '',
		};
		push @records, $rec;
		$conn{ fileno($c) } = { sock => $c, rec => $rec, in => '' };
		$sel->add($c);
		return 1;
	};

	while (1)
	{
		for my $s ($sel->can_read(1))
		{
			if ($listener{ fileno($s) })
			{
				$accept->($s);
				next;
			}
			if ($s == $ctl)
			{
				my $got = sysread($ctl, $ctlbuf, 65536, length $ctlbuf);
				POSIX::_exit(0) unless $got;
				while ($ctlbuf =~ s/^(.*)\n//)
				{
					my $op = $1;
					my $answer = 'ok';
					if ($op eq 'mark')
					{
						for my $l (@$listen)
						{
							1 while $accept->($l);
						}
						$period++;
						$answer = $period;
					}
					elsif ($op eq 'list')
					{
						$answer = join(' ',
							map {
								join(',', $_->{port}, $_->{pid},
									unpack('H*', $_->{comm}), $_->{period},
									unpack('H*', $_->{bytes}))
							} @records);
					}
					print $ctl "$answer\n";
				}
				next;
			}
			my $c = $conn{ fileno($s) } or next;
			my $buf = '';
			my $got = sysread($s, $buf, 65536);
			unless ($got)
			{
				$sel->remove($s);
				delete $conn{ fileno($s) };
				close $s;
				next;
			}
			my $rec = $c->{rec};
			$rec->{bytes} .= substr($buf, 0, $KEEP - length $rec->{bytes})
			  if length $rec->{bytes} < $KEEP;
			next unless defined $primary;
			$c->{in} .= $buf;
			$c->{in} = '' if length $c->{in} > $KEEP;    # not RESP
			syswrite($s, _sentinel_answer($primary, @$_))
			  for parse_commands(\$c->{in});
		}
	}
}

1;
