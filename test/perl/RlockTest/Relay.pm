
=pod

=head1 NAME

RlockTest::Relay - what rlock's test relays share: a listening port on
loopback, a child process that serves it, and a control channel to ask
the child things

=head1 SYNOPSIS

  package RlockTest::Something;
  use parent -norequire, 'RlockTest::Relay';
  sub _serve { my ($listen, $ctl, $upstream) = @_; ... }

  my $relay = RlockTest::Something->start($redis->port);
  my $answer = $relay->ask('a control line', 5);   # undef after 5 s
  $relay->stop;
  my $many = RlockTest::Something->start($redis->port, ports => 30);
  my @ports = $many->ports;

=head1 DESCRIPTION

start() listens on a free loopback port (or on as many as the ports
option says), forks, and runs the subclass's _serve($listen, $ctl,
$upstream, @more_listeners) in the child: $ctl is its end of a socket
pair, on which it reads control lines and writes one line back for each.
stop() (also on destruction) ends the child.

=cut

package RlockTest::Relay;

use strict;
use warnings;

use IO::Handle;
use IO::Select;
use Time::HiRes ();
use IO::Socket::INET;
use POSIX ();
use Socket qw(AF_UNIX SOCK_STREAM PF_UNSPEC);

sub start
{
	my ($class, $upstream, %opt) = @_;
	my @listen = map {
		IO::Socket::INET->new(
			Listen => 16,
			LocalAddr => '127.0.0.1',
			LocalPort => 0,
			Proto => 'tcp',
			ReuseAddr => 1) or die "$class: cannot listen: $!"
	} 1 .. ($opt{ports} // 1);
	socketpair(my $parent, my $child, AF_UNIX, SOCK_STREAM, PF_UNSPEC)
	  or die "$class: socketpair: $!";
	my $pid = fork();
	die "$class: fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		close $parent;
		$class->can('_serve')->($listen[0], $child, $upstream, @listen[ 1 .. $#listen ]);
		POSIX::_exit(0);
	}
	close $child;
	$parent->autoflush(1);
	my $self = bless {
		pid => $pid,
		ports => [ map { $_->sockport } @listen ],
		ctl => $parent,
	}, $class;
	close $_ for @listen;
	return $self;
}

sub port { $_[0]{ports}[0] }

# Every port it listens on, the first one first.
sub ports { @{ $_[0]{ports} } }

# Send a control line; return the child's one-line answer, or undef if
# none came within $timeout seconds (10 by default) or the child is gone.
sub ask
{
	my ($self, $line, $timeout) = @_;
	print { $self->{ctl} } "$line\n";
	my $sel = IO::Select->new($self->{ctl});
	my $deadline = Time::HiRes::time() + ($timeout // 10);
	# (select ends early on a signal, SIGCHLD say: wait the rest)
	for (;;)
	{
		my $left = $deadline - Time::HiRes::time();
		return undef if $left <= 0;
		$! = 0;
		last if $sel->can_read($left);
		return undef unless $!{EINTR};
	}
	my $answer = readline($self->{ctl});
	chomp $answer if defined $answer;
	return $answer;
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'TERM', $self->{pid};
	waitpid($self->{pid}, 0);
	delete $self->{pid};
}

sub DESTROY
{
	my ($self) = @_;
	local $?;
	$self->stop;
}

1;
